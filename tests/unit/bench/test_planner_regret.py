"""The planner-regret yardstick (bench/lib/regret.py, bench/planner_regret.py): the hidden truth,
the true cost, each rule's pick and regret. Pure, no stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.lib.regret import (
    DlperfRatio,
    HostTruth,
    TruthModel,
    cheapest_per_hour,
    draw_truth,
    dstack_rule,
    oracle,
    regrets,
    speed_aware,
    summarise,
    tether_planner,
    true_cost_usd,
)
from bench.planner_regret import book, load_hours_model, run, shared_picks, strategies
from functions.domain.cost import cost_offer
from functions.domain.jobspec import JobSpec, parse_job
from functions.domain.offer import Offer

# Two hours on the reference GPU, 5 min fixed start-up, a 6 GB download (1 min at 800 Mbit/s),
# 100 GB of disk, no uploads, a fixed checkpoint interval: every cost below is p × hours (+ the
# download's traffic), interruptions aside (reliability 0.9999: ~1e-4 per hour).
JOB = parse_job({
    "name": "hand", "image": "i", "run": "r", "budget_usd": 50, "expected_hours": 2,
    "expected_startup_min": 5,
    "resources": {"min_disk_gb": 100},
    "data": {"download_gb": 6, "upload_gb_per_checkpoint": 0},
    "checkpoint": {"interval_min": 30},
})  # fmt: skip


def _offer(
    offer_id: int, base: float, listed: float, storage: float, down_cost: float, dlperf: float
) -> Offer:
    return Offer.model_validate(
        {"id": offer_id, "machine_id": offer_id, "gpu_name": "RTX 4090", "num_gpus": 1,
         "gpu_ram": 24564, "disk_space": 200, "dph_base": base, "dph_total": listed,
         "storage_cost": storage, "inet_down": 800, "inet_up": 800, "inet_down_cost": down_cost,
         "inet_up_cost": 0.0, "reliability2": 0.9999, "rentable": True, "rented": False,
         "dlperf": dlperf}
    )  # fmt: skip


# X: cheapest listed, but $0.30/h of disk at 100 GB → p = 0.60; fast (the reference).
# Y: lowest GPU + disk (p = 0.40) but $0.10/GB download ($0.60); a third of the speed.
# Z: p = 0.50, free traffic; half the speed. The planner at 2 h prices X 1.26, Y 1.44, Z 1.05.
X = _offer(1, base=0.30, listed=0.31, storage=2.16, down_cost=0.0, dlperf=100.0)
Y = _offer(2, base=0.35, listed=0.36, storage=0.36, down_cost=0.10, dlperf=25.0)
Z = _offer(3, base=0.40, listed=0.41, storage=0.72, down_cost=0.0, dlperf=25.0)
TRUTH = {
    1: HostTruth(speed=1.0, startup_min=5.0),  # 2 h + 6 min at 0.60      = 1.26
    2: HostTruth(speed=1 / 3, startup_min=11.0),  # 6 h + 12 min at 0.40 + 0.60 = 3.08
    3: HostTruth(speed=0.5, startup_min=5.0),  # 4 h + 6 min at 0.50      = 2.05
}


def test_hand_made_book_true_costs() -> None:
    assert true_cost_usd(JOB, X, TRUTH[1]) == pytest.approx(1.26, rel=1e-3)
    assert true_cost_usd(JOB, Y, TRUTH[2]) == pytest.approx(3.08, rel=1e-3)
    assert true_cost_usd(JOB, Z, TRUTH[3]) == pytest.approx(2.05, rel=1e-3)


def test_hand_made_book_each_rules_pick_and_regret() -> None:
    offers = [X, Y, Z]
    assert tether_planner(JOB, offers).id == 3  # planner: Z 1.05 < X 1.26 < Y 1.44
    assert cheapest_per_hour(JOB, offers).id == 1  # listed 0.31
    assert dstack_rule(JOB, offers).id == 2  # GPU + disk 0.40
    # The placeholder: X 2 h → 1.26, Y 8 h → 3.84, Z 8 h → 4.05.
    slot = speed_aware(DlperfRatio(reference_dlperf=100.0))
    assert slot(JOB, offers).id == 1
    rules = {"tether": tether_planner, "cheapest": cheapest_per_hour, "dstack": dstack_rule,
             "speed": slot, "oracle": oracle(TRUTH)}  # fmt: skip
    got = regrets(JOB, offers, TRUTH, rules)
    assert got is not None
    assert got["tether"] == pytest.approx(2.05 / 1.26 - 1, abs=1e-3)  # 62.7 %
    assert got["dstack"] == pytest.approx(3.08 / 1.26 - 1, abs=1e-3)  # 144.4 %
    assert got["cheapest"] == 0.0 and got["speed"] == 0.0 and got["oracle"] == 0.0


def test_no_qualifying_offer_has_no_regret() -> None:
    rented = _offer(9, base=0.1, listed=0.1, storage=0.0, down_cost=0.0, dlperf=50.0)
    gone = rented.model_copy(update={"rented": True})
    assert regrets(JOB, [gone], {9: HostTruth(1.0, 5.0)}, {"t": tether_planner}) is None


def test_true_cost_at_the_specs_hours_and_start_up_is_the_planners_cost() -> None:
    spec_truth = HostTruth(speed=1.0, startup_min=JOB.expected_startup_min)
    for offer in (X, Y, Z):
        assert true_cost_usd(JOB, offer, spec_truth) == cost_offer(JOB, offer).expected_total_usd


def test_truth_is_deterministic_per_seed() -> None:
    offers = book(3, 50)
    model = TruthModel("t", exponent=0.5)
    assert book(3, 50) == offers
    assert draw_truth(offers, model, 3) == draw_truth(offers, model, 3)
    assert draw_truth(offers, model, 3) != draw_truth(offers, model, 4)


def test_truth_without_noise_is_the_dlperf_ratio_to_the_exponent() -> None:
    model = TruthModel("exact", exponent=0.5, sigma=0.0, reference_dlperf=100.0)
    truth = draw_truth([X, Y], model, 0)
    assert truth[1].speed == pytest.approx(1.0)
    assert truth[2].speed == pytest.approx(0.5)  # (25 / 100) ** 0.5
    offers = book(0, 200)
    startups = [t.startup_min for t in draw_truth(offers, model, 0).values()]
    assert min(startups) >= 3.0 and max(startups) <= 12.0


def test_truth_speed_follows_dlperf_per_gpu() -> None:
    offers = book(1, 400)
    truth = draw_truth(offers, TruthModel("t", exponent=1.0, sigma=0.2), 1)

    def mean_speed(gpu: str) -> float:
        speeds = [truth[o.id].speed for o in offers if o.gpu_name == gpu]
        return sum(speeds) / len(speeds)

    # Per GPU: an 8x RTX 3090 box is no faster per job than one 3090.
    assert 0.2 < mean_speed("RTX 3090") < 0.4  # dlperf 28 of the 4090's 97.5
    assert 0.85 < mean_speed("RTX 4090") < 1.15


def test_oracle_has_zero_regret_on_generated_books() -> None:
    for seed in range(3):
        offers = book(seed, 150)
        truth = draw_truth(offers, TruthModel("t", exponent=0.5), seed)
        got = regrets(JOB, offers, truth, {"oracle": oracle(truth), **strategies()})
        assert got is not None
        assert got["oracle"] == 0.0
        assert all(value >= 0.0 for value in got.values())


def test_summarise_names_median_worst_decile_mean_and_oracle_share() -> None:
    s = summarise([0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0, 2.0])
    assert s["median"] == pytest.approx(0.4)
    assert s["p90"] == pytest.approx(1.0)  # inclusive: the 10th of 11 sorted values
    assert s["mean"] == pytest.approx(5.8 / 11)
    assert s["picked_oracle"] == pytest.approx(2 / 11)
    assert s["n"] == 11 and s["max"] == 2.0
    with pytest.raises(ValueError, match="no regrets"):
        summarise([])


def spec_hours(job: JobSpec, offer: Offer) -> float:
    """A speed model that knows nothing: every host at the spec's hours (the planner today)."""
    return job.expected_hours


def test_speed_model_slot_loads_a_callable_by_name() -> None:
    name = f"{__name__}:spec_hours"
    rules = strategies(name)
    assert list(rules)[-1] == f"speed-aware ({name})"
    assert rules[f"speed-aware ({name})"](JOB, [X, Y, Z]).id == 3  # the planner's own pick
    with pytest.raises(ValueError, match="MODULE:NAME"):
        load_hours_model("no_colon")
    with pytest.raises(ModuleNotFoundError):
        load_hours_model("no_such_module_here:f")
    with pytest.raises(ValueError, match="not callable"):
        load_hours_model("bench.lib.regret:REFERENCE_GPU")


def test_shared_picks_absent_and_present(tmp_path: Path) -> None:
    assert shared_picks({"hand": JOB}, strategies(), tmp_path / "absent.json") is None
    path = tmp_path / "offers.json"
    records = [o.model_dump() for o in (X, Y, Z)]
    path.write_text(json.dumps({"offers": records}))
    picks = shared_picks({"hand": JOB}, strategies(include_placeholder=True), path)
    assert picks is not None and picks["offers"] == 3
    by_rule = picks["jobs"]["hand"]["picks"]
    assert by_rule["tether (first run)"]["offer_id"] == 3  # no reference_gpu: the spec's hours
    assert by_rule["dstack's rule"]["offer_id"] == 2
    assert by_rule["cheapest $/h"]["listed_usd_per_hour"] == pytest.approx(0.31)
    # The default reference is the RTX 4090's 97.5: X (100) is at least as fast, Y and Z 4× slower.
    assert by_rule["speed-aware (bench's dlperf ratio)"]["offer_id"] == 1
    assert by_rule["speed-aware (bench's dlperf ratio)"]["dlperf"] == 100.0


def test_the_run_judges_the_measured_rules_and_the_bound_beside_the_others() -> None:
    results = run(seeds=1, count=80, runs=2, shared=Path("/nonexistent/offers.json"))
    assert results["strategies"] == [
        "tether (first run)", "tether's old prior (dlperf ratio)", "cheapest $/h",
        "dstack's rule", "tether (first run, with its move)",
        "tether (after its first generation)", "tether (measured, 1 run)",
        "tether (measured, 2 runs)", "tether (measured, 1 run, no pooling)",
        "bound: the truth's dlperf law",
    ]  # fmt: skip
    for per_job in results["jobs"].values():
        for truth in ("sublinear", "proportional", "flat"):
            summaries = per_job[truth]
            assert set(summaries) == set(results["strategies"])
            assert all(s["median"] >= 0.0 for s in summaries.values())
    # What `make bench` prints: median and p90 per truth for the four rules, and the goals for
    # the job whose hours follow the GPU (qlora-7b names a reference_gpu; tiny-cpu does not).
    rules = {"tether (first run)", "tether (first run, with its move)",
             "tether (after its first generation)", "dstack's rule",
             "bound: the truth's dlperf law"}  # fmt: skip
    for by_truth in results["summary"].values():
        for truth in ("sublinear", "proportional", "flat"):
            assert set(by_truth[truth]) == rules
            assert all(set(cell) == {"median", "p90"} for cell in by_truth[truth].values())
    assert len(results["goals"]) == 3
    assert all(goal.startswith("qlora-7b: ") for goal in results["goals"])
    assert all(isinstance(met, bool) for met in results["goals"].values())


def test_after_the_first_generation_tether_leaves_a_host_that_ran_slow() -> None:
    # Flat truth, a job of 2 h on the reference: F at twice the reference's dlperf for $0.49/h,
    # R at the reference's for $0.40/h, 6 min of start-up each. The prior prices F at 2 h × 0.78
    # (the mean over the laws of 2^-a): 0.49 × 1.67 h = $0.82 against 0.40 × 2.1 h = $0.84, so
    # it rents F. F runs at the reference's pace, which says flat: F's 2 h cost $1.03, R's
    # posterior hours (about 2.3) about $0.95, so the replacement goes to R.
    import random

    from bench.lib.learned import after_first_generation

    job = JOB.model_copy(update={"reference_gpu": "RTX 4090"})
    fast = _offer(4, base=0.49, listed=0.50, storage=0.0, down_cost=0.0, dlperf=195.2)
    ref = _offer(5, base=0.40, listed=0.41, storage=0.0, down_cost=0.0, dlperf=97.6)
    truth = {4: HostTruth(1.0, 5.0), 5: HostTruth(1.0, 5.0)}
    assert tether_planner(job, [fast, ref]).id == 4
    after = after_first_generation(truth, random.Random(0))
    assert after(job, [fast, ref]).id == 5


def test_the_first_run_leaves_a_host_far_slower_than_planned_and_keeps_one_that_is_not() -> None:
    # 3 h on the reference RTX 4090 (dlperf 97.6): S is a fifth of its dlperf for $0.10/h, the
    # prior's pick; F is the reference for $0.40/h. When S trains a tenth as fast (29.5 h for the
    # rest at $0.10/h), the monitor's check after S's first checkpoint moves the job to F, and
    # the run costs both hosts' shares, less than S alone; when S trains as the flat law said,
    # it stays and the run costs S alone.
    import random

    from bench.lib.moved import first_run_with_move

    job = JOB.model_copy(update={"reference_gpu": "RTX 4090", "expected_hours": 3.0})
    slow = _offer(6, base=0.10, listed=0.11, storage=0.0, down_cost=0.0, dlperf=19.5)
    fast = _offer(7, base=0.40, listed=0.41, storage=0.0, down_cost=0.0, dlperf=97.6)
    assert tether_planner(job, [slow, fast]).id == 6
    slow_truth = {6: HostTruth(0.1, 5.0), 7: HostTruth(1.0, 5.0)}
    moved = first_run_with_move(job, [slow, fast], slow_truth, random.Random(0))
    stay = true_cost_usd(job, slow, slow_truth[6])
    assert moved.moved and moved.cost_usd < 0.6 * stay
    assert moved.cost_usd > true_cost_usd(job, fast, slow_truth[7])  # the probe is paid for
    as_planned = {6: HostTruth(1.0, 5.0), 7: HostTruth(1.0, 5.0)}
    kept = first_run_with_move(job, [slow, fast], as_planned, random.Random(0))
    assert not kept.moved
    assert kept.cost_usd == pytest.approx(true_cost_usd(job, slow, as_planned[6]))


def test_the_first_run_goals_judge_the_run_with_its_move_where_it_was_measured() -> None:
    from bench.planner_regret import (
        BOUND,
        DSTACK,
        TETHER_AFTER,
        TETHER_FIRST,
        TETHER_MOVED,
        goals_of,
    )

    def row(first: float, moved: float | None) -> dict[str, dict[str, float]]:
        cells = {TETHER_FIRST: first, TETHER_AFTER: 0.05, DSTACK: 0.5, BOUND: 0.05}
        if moved is not None:
            cells[TETHER_MOVED] = moved
        return {rule: {"median": m, "p90": m} for rule, m in cells.items()}

    first_goal = "qlora-7b: first-run median ≤ 20 % in every truth"
    with_move = goals_of({"qlora-7b": {"proportional": row(0.6, 0.15)}}, {"qlora-7b": True})
    assert with_move[first_goal]
    host_alone = goals_of({"qlora-7b": {"proportional": row(0.6, None)}}, {"qlora-7b": True})
    assert not host_alone[first_goal]
