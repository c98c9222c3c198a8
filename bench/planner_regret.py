"""Planner regret (the planner's yardstick): how far each host-choice rule lands from the best host.

    python bench/planner_regret.py [--quick] [--seeds N] [--count N] [--runs K] [--json]
                                   [--speed-model MODULE:NAME] [--tune]

Offer books are `tether_local.vast_sim.offers.generate_offers(count, seed)` (seeds 0..N−1), each
with a hidden truth per host (`bench/lib/regret.py`: speed from `dlperf` with log-normal noise, a
fixed start-up of 3–12 min) drawn from its own seeded stream, under three truths (sublinear,
proportional, flat). For each example job (`examples/*/job.yaml`) and truth, every host's TRUE
cost is the planner's own cost model (`cost_offer`) at the true hours and start-up; each rule
picks among the qualifying offers and its regret is its host's true cost / the oracle's − 1:

- tether (first run):    `plan_job` as `tether plan` and the first rent run it: expected cost
                         under the prior over the speed law (`functions/domain/speed_law.py`);
- tether (first run, with its move): the same first host until its first checkpoint, then the
                         monitor's move check (`functions.domain.move.judge_move`) on the
                         same book; a move bills both hosts (`bench/lib/moved.py`). The
                         first-run goals are judged on this row;
- tether (after its first generation): the job ran one generation on the host it first
                         picked, at that host's true pace (`bench/lib/learned.py`); the
                         replacement is planned with what it showed (`pace_estimator` with the
                         law, as `plan_rent` does): the pick for the rest of the job;
- tether's old prior:    hours ∝ reference ÷ offer dlperf (the law taken as proportional);
- tether (measured, k):  `plan_job(estimate=pace_estimator(...))` after the job ran k times
                         on earlier books of the same world, each run's true pace filed as
                         tether files a sample (`bench/lib/learned.py`): tether's real
                         estimator, calibrating the prior; `no pooling`: the same without
                         carrying the pooled factor to models not measured;
- cheapest $/h:          the lowest listed `dph_total`;
- dstack's rule:         the lowest GPU + disk $/h for the job's disk (dstack's offer ordering);
- bound:                 the truth's own dlperf law, blind only to each host's noise: not a rule
                         anyone could run, the best a dlperf-based estimate could do.

`--speed-model pkg.module:name` adds a slot for any callable (job, offer) → expected hours.
`--tune` instead weighs candidate priors over the law on books `TUNE_SEED_BASE`.. (apart from the
judged books 0..N−1 and the history books), first run and after the first generation: how
`speed_law.PRIOR_WEIGHTS` was chosen. The JSON's `summary` and `goals` are what `make bench`
prints (`bench/lib/summary.py`).
Prints per job and truth: median, worst decile (p90), mean regret and the share of books where
the rule rented the oracle's host. With the real records in ../shared/fixtures/vast/offers.json
(skipped when absent), prints which host each history-free rule rents (no truth is known there).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.jobs import example_jobs  # noqa: E402
from bench.lib.learned import (  # noqa: E402
    PaceMemory,
    after_first_generation,
    learn_snapshots,
    with_steps,
)
from bench.lib.moved import first_run_with_move  # noqa: E402
from bench.lib.regret import (  # noqa: E402
    REFERENCE_DLPERF,
    REFERENCE_GPU,
    TRUTHS,
    DlperfRatio,
    HoursModel,
    Strategy,
    TruthModel,
    cheapest_per_hour,
    dlperf_prior,
    draw_truth,
    dstack_rule,
    listed_usd_per_hour,
    qualifying,
    regrets,
    speed_aware,
    summarise,
    tether_planner,
    true_cost_usd,
)
from bench.lib.report import show, write_results  # noqa: E402
from functions.domain.cost import cost_offer, plan_job  # noqa: E402
from functions.domain.jobspec import JobSpec  # noqa: E402
from functions.domain.offer import Offer  # noqa: E402
from functions.domain.pace import JobMeasures, pace_estimator  # noqa: E402
from functions.domain.speed_law import EXPONENTS, PRIOR_WEIGHTS, SpeedLaw  # noqa: E402
from tether_local.vast_sim.offers import generate_offers  # noqa: E402

NAME = "planner_regret"
SHARED_OFFERS = ROOT.parent / "shared" / "fixtures" / "vast" / "offers.json"
BENCH_BASELINE = "speed-aware (bench's dlperf ratio)"
TETHER_FIRST = "tether (first run)"
TETHER_AFTER = "tether (after its first generation)"
# The first run as tether runs it: the first host, then the monitor's move check after that
# host's first checkpoint, and the rest on the host it judged cheaper if it moved
# (`bench/lib/moved.py`). The first-run goals are judged on it.
TETHER_MOVED = "tether (first run, with its move)"
OLD_PRIOR = "tether's old prior (dlperf ratio)"
DSTACK = "dstack's rule"
# Not a rule anyone could run: the truth's own dlperf law, blind only to each host's noise. How
# close any dlperf-based estimate can get.
BOUND = "bound: the truth's dlperf law"
HISTORY_SEED_BASE = 1_000_000  # earlier books' seeds: apart from the judged books' 0..N−1
TUNE_SEED_BASE = 2_000_000  # the books `--tune` weighs priors on: apart from both
SUMMARY_RULES = (TETHER_FIRST, TETHER_MOVED, TETHER_AFTER, DSTACK, BOUND)
FIRST_RUN_GOAL = 0.20  # first-run median regret, every truth
BOUND_GOAL = 1.5  # after the first generation: median within this × the bound's


@dataclass(frozen=True)
class Learned:
    """A tether rule that has run the job `runs` times before (bench/lib/learned.py)."""

    name: str
    runs: int
    pool: bool


def learned_rules(runs: int) -> tuple[Learned, ...]:
    """tether's estimator after 1 and after `runs` runs, and after 1 without pooling (what
    decided `functions.domain.pace.POOL`)."""
    rules = [Learned("tether (measured, 1 run)", 1, True)]
    if runs > 1:
        rules.append(Learned(f"tether (measured, {runs} runs)", runs, True))
    rules.append(Learned("tether (measured, 1 run, no pooling)", 1, False))
    return tuple(rules)


def measured_rule(memory: PaceMemory) -> Strategy:
    """tether's planner after the runs `memory` holds, as it is (with its speed law)."""
    estimate = memory.estimator()

    def choose(job: JobSpec, offers: Sequence[Offer]) -> Offer:
        return plan_job(with_steps(job), offers, estimate=estimate).ranking[0].offer

    return choose


def load_hours_model(spec: str) -> HoursModel:
    """`pkg.module:name` → the callable (job, offer) → expected hours it names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--speed-model wants MODULE:NAME, got {spec!r}")
    model = getattr(importlib.import_module(module_name), attr)
    if not callable(model):
        raise ValueError(f"{spec} is not callable")
    hours: HoursModel = model
    return hours


def strategies(
    speed_model: str | None = None, *, include_placeholder: bool = False
) -> dict[str, Strategy]:
    """The rules that need no history, in table order. The bench's dlperf-ratio placeholder is
    what tether's speed prior now is, so it is judged only when asked for."""
    hours: HoursModel
    if speed_model is None:
        slot_name, hours = BENCH_BASELINE, DlperfRatio()
    else:
        slot_name, hours = f"speed-aware ({speed_model})", load_hours_model(speed_model)
    rules: dict[str, Strategy] = {
        TETHER_FIRST: tether_planner,
        OLD_PRIOR: dlperf_prior,
        "cheapest $/h": cheapest_per_hour,
        DSTACK: dstack_rule,
    }
    if speed_model is not None or include_placeholder:
        rules[slot_name] = speed_aware(hours)
    return rules


def book(seed: int, count: int) -> list[Offer]:
    return [Offer.model_validate(r) for r in generate_offers(count, seed)]


def history_seed(seed: int, run: int, runs: int) -> int:
    return HISTORY_SEED_BASE + seed * runs + run


def run_generated(
    jobs: Mapping[str, JobSpec],
    rules: Mapping[str, Strategy],
    seeds: int,
    count: int,
    truths: Sequence[TruthModel] = TRUTHS,
    learned: Sequence[Learned] = (),
    bound: bool = False,
    first_generation: bool = False,
    seed_base: int = 0,
    law: SpeedLaw | None = None,
) -> dict[str, Any]:
    """Regret summaries by job, then truth model, then rule, over books seed_base + 0..seeds−1.
    A `learned` rule first runs the job on `runs` earlier books of the same truth model;
    `first_generation` judges tether's pick for the rest of the job after its first generation
    ran on the host it first picked (`bench/lib/learned.py`, `after_first_generation`)."""
    names = [
        *rules, *([TETHER_MOVED, TETHER_AFTER] if first_generation else []),
        *(rule.name for rule in learned), *([BOUND] if bound else []),
    ]  # fmt: skip
    collected: dict[str, dict[str, dict[str, list[float]]]] = {
        job: {t.name: {rule: [] for rule in names} for t in truths} for job in jobs
    }
    no_offer = {job: 0 for job in jobs}
    moves = {job: {t.name: 0 for t in truths} for job in jobs}
    max_runs = max((rule.runs for rule in learned), default=0)
    for seed in range(seed_base, seed_base + seeds):
        offers = book(seed, count)
        earlier = [book(history_seed(seed, i, max_runs), count) for i in range(max_runs)]
        for truth_model in truths:
            truth = draw_truth(offers, truth_model, seed)
            history = [
                (b, draw_truth(b, truth_model, history_seed(seed, i, max_runs)))
                for i, b in enumerate(earlier)
            ]
            for job_name, job in jobs.items():
                judged = dict(rules)
                if first_generation:
                    rng = random.Random(f"first-generation-{seed}-{truth_model.name}-{job_name}")
                    judged[TETHER_AFTER] = after_first_generation(truth, rng, law)
                if bound:
                    truth_law = DlperfRatio(exponent=truth_model.exponent)
                    judged[BOUND] = speed_aware(truth_law)
                for pool in sorted({rule.pool for rule in learned}):
                    snapshots = learn_snapshots(
                        with_steps(job), history, pool=pool,
                        runs={r.runs for r in learned if r.pool == pool},
                        rng=random.Random(f"measure-{seed}-{truth_model.name}-{job_name}"),
                        law=SpeedLaw(),
                    )  # fmt: skip
                    for learned_rule in learned:
                        if learned_rule.pool == pool:
                            memory = snapshots[learned_rule.runs]
                            judged[learned_rule.name] = measured_rule(memory)
                book_regrets = regrets(job, offers, truth, judged)
                if book_regrets is None:
                    no_offer[job_name] += truth_model is truths[0]
                    continue
                for rule, value in book_regrets.items():
                    collected[job_name][truth_model.name][rule].append(value)
                if first_generation:
                    candidates = qualifying(job, offers)
                    best = min(true_cost_usd(job, o, truth[o.id]) for o in candidates)
                    rng = random.Random(f"first-run-move-{seed}-{truth_model.name}-{job_name}")
                    run_ = first_run_with_move(job, candidates, truth, rng, law)
                    collected[job_name][truth_model.name][TETHER_MOVED].append(
                        run_.cost_usd / best - 1.0
                    )
                    moves[job_name][truth_model.name] += run_.moved
    out: dict[str, Any] = {}
    for job_name, by_truth in collected.items():
        out[job_name] = {"books_without_offer": no_offer[job_name]}
        for truth_name, by_rule in by_truth.items():
            out[job_name][truth_name] = {
                rule: summarise(values) for rule, values in by_rule.items() if values
            }
            if first_generation and by_rule[TETHER_MOVED]:
                share = moves[job_name][truth_name] / len(by_rule[TETHER_MOVED])
                out[job_name][truth_name][TETHER_MOVED]["moved"] = share
    return out


def shared_picks(
    jobs: Mapping[str, JobSpec], rules: Mapping[str, Strategy], path: Path = SHARED_OFFERS
) -> dict[str, Any] | None:
    """Which host each rule rents on the real records, per job; None when they are absent."""
    if not path.exists():
        return None
    offers = [Offer.model_validate(r) for r in json.loads(path.read_text())["offers"]]
    picks: dict[str, Any] = {"offers": len(offers), "jobs": {}}
    for job_name, job in jobs.items():
        candidates = qualifying(job, offers)
        if not candidates:
            picks["jobs"][job_name] = None
            continue
        per_rule = {}
        for rule_name, rule in rules.items():
            offer = rule(job, candidates)
            per_rule[rule_name] = {
                "offer_id": offer.id,
                "gpu": f"{offer.num_gpus}x {offer.gpu_name}",
                "usd_per_hour": offer.usd_per_hour(job.resources.min_disk_gb),
                "listed_usd_per_hour": listed_usd_per_hour(offer),
                "dlperf": getattr(offer, "dlperf", None),
                "planner_expected_usd": cost_offer(job, offer).expected_total_usd,
            }
        picks["jobs"][job_name] = {"qualifying": len(candidates), "picks": per_rule}
    return picks


def run(
    seeds: int,
    count: int,
    rules: Mapping[str, Strategy] | None = None,
    shared: Path = SHARED_OFFERS,
    runs: int = 3,
) -> dict[str, Any]:
    jobs = example_jobs()
    rules = strategies() if rules is None else rules
    learned = learned_rules(runs) if runs > 0 else ()
    by_job = run_generated(
        jobs, rules, seeds, count, learned=learned, bound=True, first_generation=True
    )
    summary = summary_of(by_job)
    follows_speed = {name: job.reference_gpu is not None for name, job in jobs.items()}
    return {
        "generated": {"seeds": seeds, "offers_per_book": count},
        "reference": {"gpu": REFERENCE_GPU, "dlperf": REFERENCE_DLPERF},
        "truths": [
            {"name": t.name, "exponent": t.exponent, "sigma": t.sigma, "startup_min": t.startup_min}
            for t in TRUTHS
        ],
        "law_prior": {"exponents": list(EXPONENTS), "weights": list(PRIOR_WEIGHTS)},
        "strategies": [*rules, TETHER_MOVED, TETHER_AFTER, *(rule.name for rule in learned), BOUND],
        "measured_runs": runs,
        "jobs": by_job,
        "summary": summary,
        "goals": goals_of(summary, follows_speed),
        "one_host_for_every_truth": one_host_for_every_truth(
            {name: job for name, job in jobs.items() if follows_speed[name]}, seeds, count
        ),
        "shared_fixture": shared_picks(jobs, rules, shared),
    }


def summary_of(by_job: Mapping[str, Any]) -> dict[str, Any]:
    """{job: {truth: {rule: {median, p90}}}} for the rules `make bench` prints."""
    out: dict[str, Any] = {}
    for job_name, per_job in by_job.items():
        out[job_name] = {
            truth: {
                rule: {"median": per_rule[rule]["median"], "p90": per_rule[rule]["p90"]}
                for rule in SUMMARY_RULES
                if rule in per_rule
            }
            for truth, per_rule in per_job.items()
            if isinstance(per_rule, dict)
        }
    return out


def goals_of(summary: Mapping[str, Any], follows_speed: Mapping[str, bool]) -> dict[str, bool]:
    """The goals, per job whose hours follow the GPU (`reference_gpu`: the law applies)."""
    goals: dict[str, bool] = {}
    for job_name, by_truth in summary.items():
        if not follows_speed.get(job_name) or not by_truth:
            continue
        rows = list(by_truth.values())
        # The first run as tether runs it (with its move) where the run measured it.
        first = [row.get(TETHER_MOVED, row[TETHER_FIRST])["median"] for row in rows]
        goals[f"{job_name}: first-run median ≤ {100 * FIRST_RUN_GOAL:g} % in every truth"] = all(
            m <= FIRST_RUN_GOAL for m in first
        )
        goals[f"{job_name}: first-run median never above dstack's rule"] = all(
            m <= row[DSTACK]["median"] for m, row in zip(first, rows, strict=True)
        )
        goals[
            f"{job_name}: after its first generation, median ≤ {BOUND_GOAL:g}× the bound's "
            "in every truth"
        ] = all(row[TETHER_AFTER]["median"] <= BOUND_GOAL * row[BOUND]["median"] for row in rows)
    return goals


# Candidate priors over EXPONENTS (0, ¼, ½, ¾, 1) for --tune: the chosen one, linear and
# geometric decays, uniform, rising, and the two extremes for scale. Chosen: the least worst
# first-run median as a share of dstack's rule's median in the same truth.
TUNE_PRIORS: dict[str, tuple[float, ...]] = {
    "chosen (geometric 0.8)": PRIOR_WEIGHTS,
    "linear": (0.28, 0.24, 0.20, 0.16, 0.12),
    "linear, gentler": (0.24, 0.22, 0.20, 0.18, 0.16),
    "linear, steeper": (0.32, 0.26, 0.20, 0.14, 0.08),
    "uniform": (0.2, 0.2, 0.2, 0.2, 0.2),
    "geometric 0.6": (1.0, 0.6, 0.36, 0.216, 0.1296),
    "geometric 0.4": (1.0, 0.4, 0.16, 0.064, 0.0256),
    "rising 1.25": (1.0, 1.25, 1.5625, 1.953, 2.441),
    "flat only": (1.0, 0.0, 0.0, 0.0, 0.0),
    "proportional only": (0.0, 0.0, 0.0, 0.0, 1.0),
}


def first_run_with(law: SpeedLaw) -> Strategy:
    def choose(job: JobSpec, offers: Sequence[Offer]) -> Offer:
        estimate = pace_estimator(JobMeasures(name=job.name), law=law)
        return plan_job(job, offers, estimate=estimate).ranking[0].offer

    return choose


MINIMAX = "minimax regret over the laws"


def minimax_first_run(law: SpeedLaw) -> Strategy:
    """An alternative first-run rule, for --tune only: the host whose worst regret over the
    laws in `law` (each priced alone) is least, in place of the expected cost."""

    def choose(job: JobSpec, offers: Sequence[Offer]) -> Offer:
        per_law = []
        for i in range(len(law.exponents)):
            alone = tuple(1.0 if j == i else 0.0 for j in range(len(law.exponents)))
            single = SpeedLaw(exponents=law.exponents, prior_weights=alone)
            plan = plan_job(job, offers, estimate=single.estimator())
            per_law.append({c.offer.id: c.expected_total_usd for c in plan.ranking})
        best = [min(costs.values()) for costs in per_law]

        def worst_regret(offer: Offer) -> float:
            return max(c[offer.id] / b for c, b in zip(per_law, best, strict=True))

        return min(offers, key=lambda o: (worst_regret(o), o.id))

    return choose


def one_host_for_every_truth(
    jobs: Mapping[str, JobSpec], seeds: int, count: int, seed_base: int = 0
) -> dict[str, Any]:
    """How close one host can come to the best under all three truths at once (a rule that does
    not know the truth rents one host whatever it is): per book, min over hosts of the max over
    truths of its regret (the truths share each host's noise: `draw_truth`). Its median, and the
    share of books where some host is within `FIRST_RUN_GOAL` of the best under every truth."""
    worst: dict[str, list[float]] = {job: [] for job in jobs}
    for seed in range(seed_base, seed_base + seeds):
        offers = book(seed, count)
        truths = [draw_truth(offers, model, seed) for model in TRUTHS]
        for job_name, job in jobs.items():
            candidates = qualifying(job, offers)
            if not candidates:
                continue
            per_truth = []
            for truth in truths:
                costs = {o.id: true_cost_usd(job, o, truth[o.id]) for o in candidates}
                best = min(costs.values())
                per_truth.append({i: c / best - 1.0 for i, c in costs.items()})
            worst[job_name].append(min(max(r[o.id] for r in per_truth) for o in candidates))
    return {
        job: {
            "median": statistics.median(values),
            "share_within_goal": sum(v <= FIRST_RUN_GOAL for v in values) / len(values),
            "books": len(values),
        }
        for job, values in worst.items()
        if values
    }


def tune(seeds: int, count: int) -> dict[str, Any]:
    """Each candidate prior's first-run median regret per truth, and after the first
    generation, on the tuning books, for the jobs whose hours follow the GPU."""
    jobs = {name: job for name, job in example_jobs().items() if job.reference_gpu is not None}
    out: dict[str, Any] = {
        "seeds": [TUNE_SEED_BASE, TUNE_SEED_BASE + seeds - 1],
        "one_host_for_every_truth": one_host_for_every_truth(
            jobs, seeds, count, seed_base=TUNE_SEED_BASE
        ),
        "priors": {},
    }
    for name, weights in TUNE_PRIORS.items():
        law = SpeedLaw(prior_weights=weights)
        rules = {TETHER_FIRST: first_run_with(law), DSTACK: dstack_rule}
        if weights == PRIOR_WEIGHTS:
            rules[MINIMAX] = minimax_first_run(law)
        by_job = run_generated(
            jobs, rules, seeds, count, first_generation=True, law=law, seed_base=TUNE_SEED_BASE
        )
        out["priors"][name] = {
            "weights": list(weights),
            "jobs": {
                job: {
                    truth: {rule: s["median"] for rule, s in per_rule.items()}
                    for truth, per_rule in per_job.items()
                    if isinstance(per_rule, dict)
                }
                for job, per_job in by_job.items()
            },
        }
    return out


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def print_tune(tuned: dict[str, Any]) -> None:
    low, high = tuned["seeds"]
    print(f"tuning books {low}..{high}: median regret, first run / after its first generation")
    for job, one in tuned["one_host_for_every_truth"].items():
        print(
            f"  {job}: one host for every truth at once: median {_pct(one['median'])} from the "
            f"best; within {_pct(FIRST_RUN_GOAL)} under all three on "
            f"{_pct(one['share_within_goal'])} of {one['books']} books"
        )
    for name, per_prior in tuned["priors"].items():
        weights = ", ".join(f"{w:.3g}" for w in per_prior["weights"])
        for job, by_truth in per_prior["jobs"].items():
            cells = [
                f"{truth} {_pct(r[TETHER_FIRST])} / {_pct(r[TETHER_AFTER])}"
                f" (dstack {_pct(r[DSTACK])}"
                + (f", minimax {_pct(r[MINIMAX])})" if MINIMAX in r else ")")
                for truth, r in by_truth.items()
            ]
            print(f"  {name:<18} [{weights}] {job}: " + "; ".join(cells))


def print_results(results: dict[str, Any]) -> None:
    gen = results["generated"]
    ref = results["reference"]
    print(
        f"books: {gen['seeds']} generated × {gen['offers_per_book']} offers; reference GPU "
        f"{ref['gpu']} (dlperf {ref['dlperf']})"
    )
    width = max(len(s) for s in results["strategies"])
    for job_name, per_job in results["jobs"].items():
        for truth in results["truths"]:
            summaries = per_job.get(truth["name"], {})
            low, high = truth["startup_min"]
            print(
                f"\n{job_name} — truth {truth['name']}: speed ∝ dlperf^{truth['exponent']} × "
                f"lognormal(σ {truth['sigma']}), start-up {low:g}–{high:g} min; "
                f"books without a qualifying offer: {per_job['books_without_offer']}"
            )
            print(f"  {'rule':<{width}}  {'median':>8}  {'p90':>8}  {'mean':>8}  picked oracle")
            for rule in results["strategies"]:
                if rule not in summaries:
                    continue
                s = summaries[rule]
                moved = f"; moved on {_pct(s['moved'])}" if "moved" in s else ""
                print(
                    f"  {rule:<{width}}  {_pct(s['median']):>8}  {_pct(s['p90']):>8}  "
                    f"{_pct(s['mean']):>8}  {_pct(s['picked_oracle']):>8} of {s['n']}{moved}"
                )
    print()
    for job, one in results.get("one_host_for_every_truth", {}).items():
        print(
            f"{job}: the host nearest the best under all three truths at once is a median "
            f"{_pct(one['median'])} from it; within {_pct(FIRST_RUN_GOAL)} under all three on "
            f"{_pct(one['share_within_goal'])} of {one['books']} books"
        )
    for goal, met in results.get("goals", {}).items():
        print(f"goal: {goal}: {'met' if met else 'NOT met'}")
    shared = results["shared_fixture"]
    if shared is None:
        print("\nshared_fixture: absent (../shared/fixtures/vast/offers.json), skipped")
        return
    for job_name, per_job in shared["jobs"].items():
        if per_job is None:
            print(f"\n{job_name} on the real records ({shared['offers']}): no offer qualifies")
            continue
        print(
            f"\n{job_name} on the real records ({per_job['qualifying']} of {shared['offers']} "
            "qualify; no truth known, picks only):"
        )
        for rule, pick in per_job["picks"].items():
            dlperf = pick["dlperf"]
            print(
                f"  {rule:<{width}}  offer {pick['offer_id']}  {pick['gpu']:<18} "
                f"${pick['usd_per_hour']:.3f}/h (listed ${pick['listed_usd_per_hour']:.3f})  "
                f"dlperf {'?' if dlperf is None else f'{dlperf:.1f}'}  "
                f"planner's total ${pick['planner_expected_usd']:.3f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 books instead of 300")
    parser.add_argument("--seeds", type=int, default=None, help="generated books (one per seed)")
    parser.add_argument("--count", type=int, default=400, help="offers per generated book")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--runs", type=int, default=3, help="earlier runs the measured-pace rules learn from"
    )
    parser.add_argument(
        "--speed-model",
        default=None,
        metavar="MODULE:NAME",
        help="a callable (job, offer) → expected hours for the speed-aware slot "
        "(default: the bench's own dlperf-ratio placeholder)",
    )
    parser.add_argument(
        "--tune", action="store_true",
        help="weigh candidate priors over the speed law on the tuning books (not the judged ones)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    seeds = args.seeds or (40 if args.quick else 300)
    if seeds < 1 or args.count < 1:
        parser.error("--seeds and --count must be ≥ 1")
    if args.runs < 0:
        parser.error("--runs must be ≥ 0")
    if args.tune:
        tuned = tune(seeds, args.count)
        write_results(f"{NAME}_tune", tuned)
        show(tuned, as_json=args.json, printer=print_tune)
        return 0
    try:
        rules = strategies(args.speed_model)
    except (ImportError, AttributeError, ValueError) as exc:
        parser.error(f"--speed-model: {exc}")
    results = run(seeds, args.count, rules, runs=args.runs)
    write_results(NAME, results)
    show(results, as_json=args.json, printer=print_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
