"""Planner regret (the planner's yardstick): how far each host-choice rule lands from the best host.

    python bench/planner_regret.py [--quick] [--seeds N] [--count N] [--runs K] [--json]
                                   [--speed-model MODULE:NAME]

Offer books are `tether_local.vast_sim.offers.generate_offers(count, seed)` (seeds 0..N−1), each
with a hidden truth per host (`bench/lib/regret.py`: speed from `dlperf` with log-normal noise, a
fixed start-up of 3–12 min) drawn from its own seeded stream, under three truths (sublinear,
proportional, flat). For each example job (`examples/*/job.yaml`) and truth, every host's TRUE
cost is the planner's own cost model (`cost_offer`) at the true hours and start-up; each rule
picks among the qualifying offers and its regret is its host's true cost / the oracle's − 1:

- tether (speed prior):  `plan_job` as it is (hours from the offer's dlperf, or as given);
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
Prints per job and truth: median, worst decile (p90), mean regret and the share of books where
the rule rented the oracle's host. With the real records in ../shared/fixtures/vast/offers.json
(skipped when absent), prints which host each history-free rule rents (no truth is known there).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.jobs import example_jobs  # noqa: E402
from bench.lib.learned import PaceMemory, learn_snapshots, with_steps  # noqa: E402
from bench.lib.regret import (  # noqa: E402
    REFERENCE_DLPERF,
    REFERENCE_GPU,
    TRUTHS,
    DlperfRatio,
    HoursModel,
    Strategy,
    TruthModel,
    cheapest_per_hour,
    draw_truth,
    dstack_rule,
    listed_usd_per_hour,
    qualifying,
    regrets,
    speed_aware,
    summarise,
    tether_planner,
)
from bench.lib.report import write_results  # noqa: E402
from functions.domain.cost import cost_offer, plan_job  # noqa: E402
from functions.domain.jobspec import JobSpec  # noqa: E402
from functions.domain.offer import Offer  # noqa: E402
from tether_local.vast_sim.offers import generate_offers  # noqa: E402

NAME = "planner_regret"
SHARED_OFFERS = ROOT.parent / "shared" / "fixtures" / "vast" / "offers.json"
BENCH_BASELINE = "speed-aware (bench's dlperf ratio)"
TETHER_PRIOR = "tether (speed prior)"
# Not a rule anyone could run: the truth's own dlperf law, blind only to each host's noise. How
# close any dlperf-based estimate can get.
BOUND = "bound: the truth's dlperf law"
HISTORY_SEED_BASE = 1_000_000  # earlier books' seeds: apart from the judged books' 0..N−1


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
        TETHER_PRIOR: tether_planner,
        "cheapest $/h": cheapest_per_hour,
        "dstack's rule": dstack_rule,
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
) -> dict[str, Any]:
    """Regret summaries by job, then truth model, then rule, over books 0..seeds−1. A `learned`
    rule first runs the job on `runs` earlier books of the same truth model."""
    names = [*rules, *(rule.name for rule in learned), *([BOUND] if bound else [])]
    collected: dict[str, dict[str, dict[str, list[float]]]] = {
        job: {t.name: {rule: [] for rule in names} for t in truths} for job in jobs
    }
    no_offer = {job: 0 for job in jobs}
    max_runs = max((rule.runs for rule in learned), default=0)
    for seed in range(seeds):
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
                if bound:
                    law = DlperfRatio(exponent=truth_model.exponent)
                    judged[BOUND] = speed_aware(law)
                for pool in sorted({rule.pool for rule in learned}):
                    snapshots = learn_snapshots(
                        with_steps(job), history, pool=pool,
                        runs={r.runs for r in learned if r.pool == pool},
                        rng=random.Random(f"measure-{seed}-{truth_model.name}-{job_name}"),
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
    out: dict[str, Any] = {}
    for job_name, by_truth in collected.items():
        out[job_name] = {"books_without_offer": no_offer[job_name]}
        for truth_name, by_rule in by_truth.items():
            out[job_name][truth_name] = {
                rule: summarise(values) for rule, values in by_rule.items() if values
            }
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
    return {
        "generated": {"seeds": seeds, "offers_per_book": count},
        "reference": {"gpu": REFERENCE_GPU, "dlperf": REFERENCE_DLPERF},
        "truths": [
            {"name": t.name, "exponent": t.exponent, "sigma": t.sigma, "startup_min": t.startup_min}
            for t in TRUTHS
        ],
        "strategies": [*rules, *(rule.name for rule in learned), BOUND],
        "measured_runs": runs,
        "jobs": run_generated(jobs, rules, seeds, count, learned=learned, bound=True),
        "shared_fixture": shared_picks(jobs, rules, shared),
    }


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


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
                print(
                    f"  {rule:<{width}}  {_pct(s['median']):>8}  {_pct(s['p90']):>8}  "
                    f"{_pct(s['mean']):>8}  {_pct(s['picked_oracle']):>8} of {s['n']}"
                )
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
    args = parser.parse_args(argv)
    seeds = args.seeds or (40 if args.quick else 300)
    if seeds < 1 or args.count < 1:
        parser.error("--seeds and --count must be ≥ 1")
    if args.runs < 0:
        parser.error("--runs must be ≥ 0")
    try:
        rules = strategies(args.speed_model)
    except (ImportError, AttributeError, ValueError) as exc:
        parser.error(f"--speed-model: {exc}")
    results = run(seeds, args.count, rules, runs=args.runs)
    write_results(NAME, results)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_results(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
