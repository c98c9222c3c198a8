"""Hosts that turn hostile with the storage keys and agent token they were given: a destroyed
host that comes back after its replacement (`zombie`), and the current host writing and
reporting crafted manifests (`forged-manifest`). What they do with the keys is in
`storage_attacks`; these check that the control plane and the next host are not fooled.
"""

from __future__ import annotations

import time

from tether_local.demo.evidence import restore_candidates
from tether_local.demo.host_faults import destroy
from tether_local.demo.run import DemoError, DemoRun
from tether_local.demo.storage_attacks import HostKeys, copy_checkpoint, crafted_manifests
from tether_local.demo.transfer_kills import newest_recorded
from tether_local.hosts.local_hosts import marked_processes


def zombie(run: DemoRun) -> None:
    """g1 dies; g2 takes over; g1's host comes back and is told it is superseded. Its keys still
    work until they expire: written where g2 or the job root would be read they are refused, and
    a checkpoint it plants in its own prefix at a far higher step is never restored: g2 dies
    too, and g3 restores g2's latest recorded checkpoint."""
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g1 = run.wait_step(1, 50, checkpoint=50)
    destroy(run, g1)
    run.wait_training(2)
    run.wait_step(2, 90)
    old = hosts.get(run.instance(g1))
    run.say(f"ZOMBIE: instance {old.instance_id} comes back with its generation-1 agent")
    zombie_at = time.time()
    hosts.zombie(old.instance_id)
    gone = run.wait(
        "the zombie's agent to stop",
        lambda _v: not marked_processes(old.marker) and time.time(),
        timeout_s=30,
    )
    run.say(f"the zombie stopped itself after {gone - zombie_at:.1f} s (superseded)")
    run.checks["zombie_stopped_itself"] = True
    run.checks["zombie_never_billed"] = not [
        s for s in run.samples if s.at >= zombie_at and old.instance_id in s.instance_ids
    ]
    keys = HostKeys.of(run, old)
    answers = keys.writes_outside_own_prefix(other_generation=2)
    run.say(f"the zombie's key, outside generation 1's prefix: {sorted(set(answers.values()))}")
    run.checks["zombie_key_refused_outside_its_prefix"] = set(answers.values()) == {
        "403 AccessDenied"
    }
    planted = copy_checkpoint(keys, 50, ZOMBIE_STEP)
    run.say(f"the zombie plants a complete checkpoint at step {ZOMBIE_STEP} in its own prefix")
    current = run.max_step.get(2, 0)
    g2 = run.wait_step(2, current, checkpoint=current - current % 50 + 50)
    destroy(run, g2)
    run.wait_training(3)
    given = restore_candidates(run.stack, run.job_id).get(3, ())
    restored = run.restores.get(3)
    run.checks["third_generation_restored_the_latest_recorded"] = bool(
        given
        and given[0].generation == 2
        and restored is not None
        and restored.manifest_key == given[0].manifest_key
        and planted["manifest_key"] not in {c.manifest_key for c in given}
    )


ZOMBIE_STEP = 99_950


def forged_manifest(run: DemoRun) -> None:
    """g1, still current, turns hostile: it writes four crafted manifests in its own prefix and
    reports each in a heartbeat, so the control plane records them, newest first. g1 dies; g2
    skips every crafted one with its reason (in its heartbeats and on the timeline) and
    restores g1's last real checkpoint; g1's key is refused anywhere g2 or the job root would
    be read."""
    assert run.stack.hosts is not None
    hosts = run.stack.hosts
    g1 = run.wait_step(1, 100, checkpoint=100)
    host = hosts.get(run.instance(g1))
    hosts.freeze(host.instance_id)  # its real agent records nothing more meanwhile
    time.sleep(IN_FLIGHT_S)  # a heartbeat it sent just before lands first
    real = newest_recorded(run)
    if real is None:
        raise DemoError("g1 has no recorded checkpoint to forge from")
    keys = HostKeys.of(run, host)
    crafted = crafted_manifests(keys, real, FORGED_STEP)
    for kind, ref in crafted.items():
        status = keys.heartbeat(run, {"step": real, "last_checkpoint": ref})
        run.say(
            f"g1 writes and reports a crafted manifest ({kind}) at step {ref['step']}: {status}"
        )
    recorded = run.store.get_job(run.job_id)
    kinds = {ref["manifest_key"]: kind for kind, ref in crafted.items()}
    newest = [c.manifest_key for c in recorded.recorded_checkpoints] if recorded else []
    run.checks["crafted_manifests_recorded"] = set(newest[: len(kinds)]) == set(kinds)
    run.fault("dead", g1, lambda: hosts.destroy(host.instance_id))  # still frozen
    run.wait_training(2)
    answers = keys.writes_outside_own_prefix(other_generation=2)
    run.checks["old_key_refused_outside_its_prefix"] = set(answers.values()) == {"403 AccessDenied"}
    g2 = run.generation(run.poll(), 2)
    report = g2.heartbeat.restore if g2 is not None and g2.heartbeat is not None else None
    skipped = {s.manifest_key: s.reason for s in report.skipped} if report else {}
    restored = run.restores.get(2)
    run.say(
        f"g2 skipped {len(skipped)} crafted manifest(s) and restored step "
        f"{restored.step if restored else '-'}"
    )
    run.checks["crafted_never_restored"] = (
        restored is not None and restored.manifest_key not in kinds and restored.step == real
    )
    run.checks["every_crafted_one_skipped_with_its_reason"] = all(
        FORGED_REASONS[kind] in skipped.get(key, "") for key, kind in kinds.items()
    )
    run.checks["skips_on_the_timeline"] = any(
        e.kind == "restore_skipped" for e in (run.view.events if run.view else [])
    )


IN_FLIGHT_S = 0.5
FORGED_STEP = 100_000  # above any real step: as the newest recorded, each would win
FORGED_REASONS = {
    "bad-json": "malformed manifest",
    "dotdot-path": "unsafe path in manifest: ../../../../escape",
    "huge-size": "manifest says 1000000000000000",
    "wrong-sha256": "sha256 mismatch",
}


__all__ = ["FORGED_REASONS", "FORGED_STEP", "ZOMBIE_STEP", "forged_manifest", "zombie"]
