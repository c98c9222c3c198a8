"""A rent Vast refuses for its arguments (400 `invalid_args`), on the real synthesized state
machine with the Vast simulator: the job FAILS with the field named, after one rent and no
other offer tried, nothing rents, and the RentsRefused and JobsFailed metrics are emitted.

Every offer refuses the same arguments, so trying the next offer (as for an offer taken) would
only spend the attempt on refusals; waiting for capacity would retry the same request for an
hour; neither can ever start the job.
"""

from __future__ import annotations

import json

import pytest

from functions.domain.job import JobState
from tests.integration.supervision_harness import Supervised

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def emitted_metrics(out: str) -> dict[str, float]:
    """Metric name → the sum of its values, from the EMF documents the handlers printed."""
    found: dict[str, float] = {}
    for line in out.splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                values = value if isinstance(value, list) else [value]
                found[metric["Name"]] = found.get(metric["Name"], 0.0) + sum(values)
    return found


def test_a_rent_refused_for_its_arguments_fails_the_job_after_one_rent(
    sup: Supervised, capsys: pytest.CaptureFixture[str]
) -> None:
    sup.vast.inject("invalid_args")
    offers_before = len(sup.vast.offers())
    job = sup.submit()
    capsys.readouterr()

    result = sup.run("provision", job.job_id, 1, "submitted")

    assert result["status"] == "SUCCEEDED", result
    found = sup.store.get_job(job.job_id)
    assert found is not None and found.state == JobState.FAILED
    assert found.stop_reason == "failed"
    assert found.state_reason.startswith(
        "Vast refuses this job's create-instance request (Vast answered 400 invalid_args): env: "
    )
    assert found.state_reason.endswith("nothing was rented")
    assert sup.rents() == 1  # the first offer only: the next would refuse the same
    assert sup.vast.instances() == [] and sup.vast.gpu_billing_instances() == []
    assert len(sup.vast.offers()) == offers_before  # the offer was not taken
    assert sup.store.get_generation(job.job_id, 1) is None
    events = sup.events(job.job_id)
    assert events.count("rent_refused") == 1 and "failed" in events
    assert "offer_gone" not in events and "no_capacity" not in events
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics.get("RentsRefused") == 1
    assert metrics.get("JobsFailed") == 1
