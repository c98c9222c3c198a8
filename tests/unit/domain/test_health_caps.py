"""The health policy's verdicts that end a job, as a table: an image that cannot be pulled (the
job's fault), and the replacement caps per cause (docs/architecture.md#replacement-caps)."""

from __future__ import annotations

import pytest

from functions.domain.health import Health, HealthInput, InstanceView, classify
from functions.domain.jobspec import Policy
from tests.unit.domain.health_facts import NOW, POLICY, gpu, hb, inst, starting, state

PULL_DENIED = "Error response from daemon: pull access denied for acme/x, repository does not exist"
DEAD_CAP = Policy(max_replacements_dead=2)

CASES: list[tuple[str, HealthInput, Health]] = [
    # an image that cannot be pulled: the job's fault
    (
        "loading with a pull error",
        starting(60, instance=inst("loading", status_msg=PULL_DENIED)),
        Health.FAILED,
    ),
    (
        "Vast null status with a manifest error",
        starting(5, instance=inst(None, status_msg="manifest for acme/x:v9 not found")),
        Health.FAILED,
    ),
    (
        "pulling, no error yet",
        starting(60, instance=inst("loading", status_msg="Pulling image")),
        Health.STARTING,
    ),
    (
        "a registry rate limit is the host's IP's problem, not the image's",
        starting(60, instance=inst("loading", status_msg="toomanyrequests: pull rate limit")),
        Health.STARTING,
    ),
    (
        "a pull timeout is left to the startup timeout",
        starting(60, instance=inst("loading", status_msg="net/http: TLS handshake timeout")),
        Health.STARTING,
    ),
    (
        "a stale pull message on a running host",
        state(instance=inst("running", status_msg=PULL_DENIED)),
        Health.HEALTHY,
    ),
    (
        "a pull error while Vast cannot be read is not seen",
        starting(60, instance=InstanceView(listed=False, status_msg=PULL_DENIED)),
        Health.STARTING,
    ),
    # replacement caps per cause
    (
        "dead, 1 of 2 dead replacements used",
        state(instance=inst("exited"), policy=DEAD_CAP, replacements={Health.DEAD: 1}),
        Health.DEAD,
    ),
    (
        "dead, 2 of 2 dead replacements used",
        state(instance=inst("exited"), policy=DEAD_CAP, replacements={Health.DEAD: 2}),
        Health.FAILED,
    ),
    (
        "dead, hung replacements do not count against the dead cap",
        state(instance=inst("exited"), policy=DEAD_CAP, replacements={Health.HUNG: 9}),
        Health.DEAD,
    ),
    (
        "dead with max_replacements_dead 0",
        state(instance=inst("exited"), policy=Policy(max_replacements_dead=0)),
        Health.FAILED,
    ),
    (
        "hung, 3 of 3 hung replacements used (the default)",
        state(progress_at=NOW - 1800, heartbeat=hb(gpu=gpu(0)), replacements={Health.HUNG: 3}),
        Health.FAILED,
    ),
    (
        "hung, 2 of 3 hung replacements used",
        state(progress_at=NOW - 1800, heartbeat=hb(gpu=gpu(0)), replacements={Health.HUNG: 2}),
        Health.HUNG,
    ),
    (
        "over budget beats a used-up cap",
        state(instance=inst("exited"), spend_usd=100.5, replacements={Health.DEAD: 5}),
        Health.OVER_BUDGET,
    ),
]


@pytest.mark.parametrize(("name", "facts", "expected"), CASES, ids=[c[0] for c in CASES])
def test_classify(name: str, facts: HealthInput, expected: Health) -> None:
    verdict = classify(facts)
    assert verdict.health is expected, verdict.reason
    assert verdict.reason


def test_a_used_up_cap_fails_the_job_with_the_field_and_still_blames_the_host() -> None:
    verdict = classify(
        state(instance=inst("offline"), policy=DEAD_CAP, replacements={Health.DEAD: 2})
    )
    assert (verdict.health, verdict.cause, verdict.action) == (Health.FAILED, Health.DEAD, "stop")
    assert verdict.blames_host
    assert "instance is offline" in verdict.reason
    assert "2 replacement(s) for dead hosts already, policy.max_replacements_dead is 2" in (
        verdict.reason
    )


def test_a_pull_error_fails_the_job_and_blames_no_host() -> None:
    verdict = classify(starting(60, instance=inst("loading", status_msg=PULL_DENIED)))
    assert (verdict.action, verdict.blames_host, verdict.cause) == ("stop", False, None)
    assert verdict.reason == f"the image cannot be pulled: {PULL_DENIED}"


def test_the_default_caps() -> None:
    """What a user gets without a `policy:` (docs/job-spec.md): 5 dead, 3 hung, 3 crashed."""
    assert (POLICY.max_replacements_dead, POLICY.max_replacements_hung, POLICY.max_restarts) == (
        5,
        3,
        3,
    )
