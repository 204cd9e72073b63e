"""The live guard's error rates under continuous monitoring, by simulation (issue 18).

Each simulated fleet sends one episode to each arm at a time (success with the arm's rate) and
the guard looks after every pair, from `min_episodes` on, until it decides or the new arm
reaches `max_episodes`. Cases: equal arms (A/A) at 0.3 and 0.5, where any rollback or promotion
is wrong; 30% vs 60% and 60% vs 30%, where the right verdict must come. Both rules, the same
seeds: `msprt` (the default) and `bayes` (the rule before it).

    .venv/bin/python benchmarks/guard_error_rates.py [--fleets 2000] [--rules msprt,bayes]

Prints a Markdown table: per rule and case, wrong rollbacks, wrong promotions, right verdicts,
inconclusive, and the median episodes per arm at the decision.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time

from harness_r1.deploy import GuardConfig, Verdict, judge, probability_better

CASES = {
    "A/A 0.3": (0.3, 0.3),
    "A/A 0.5": (0.5, 0.5),
    "new 0.6 vs 0.3 (gain)": (0.6, 0.3),
    "new 0.3 vs 0.6 (harm)": (0.3, 0.6),
}


@functools.cache
def _cached_better(s1: int, n1: int, s0: int, n0: int) -> float:
    return probability_better(s1, n1, s0, n0)


def simulate(config: GuardConfig, p_new: float, p_old: float, seed: int) -> tuple[str, int]:
    """(verdict label, episodes per arm at the end) of one fleet."""
    rng = random.Random(seed)
    s1 = s0 = 0
    for n in range(1, config.max_episodes + 1):
        s1 += rng.random() < p_new
        s0 += rng.random() < p_old
        if n < config.min_episodes and n < config.max_episodes:
            continue
        if config.method == "bayes":
            # the same rule as judge(), with the Beta sums memoised across fleets
            p = _cached_better(s1, n, s0, n)
            if 1.0 - p >= config.rollback_probability:
                return "rollback", n
            if p >= config.promote_probability:
                return "promote", n
            if n >= config.max_episodes:
                return "inconclusive", n
            continue
        decision = judge("new", "old", (n, s1), (n, s0), config)
        if decision.verdict is Verdict.PROMOTE:
            return "promote", n
        if decision.verdict is Verdict.ROLLBACK:
            label = "inconclusive" if decision.reason == "live_guard_inconclusive" else "rollback"
            return label, n
    return "inconclusive", config.max_episodes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fleets", type=int, default=2000)
    parser.add_argument("--rules", default="msprt,bayes")
    args = parser.parse_args()
    print(
        "| rule | case | wrong rollback | wrong promotion | right verdict | inconclusive "
        "| median episodes per arm at a verdict | seconds |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for rule in args.rules.split(","):
        config = GuardConfig(method=rule)  # type: ignore[arg-type]
        for case, (p_new, p_old) in CASES.items():
            started = time.perf_counter()
            counts = {"rollback": 0, "promote": 0, "inconclusive": 0}
            at_verdict = []
            for seed in range(args.fleets):
                label, n = simulate(config, p_new, p_old, seed)
                counts[label] += 1
                if label != "inconclusive":
                    at_verdict.append(n)
            equal = p_new == p_old
            wrong_rb = counts["rollback"] if (equal or p_new > p_old) else 0
            wrong_pr = counts["promote"] if (equal or p_new < p_old) else 0
            right = 0 if equal else counts["promote" if p_new > p_old else "rollback"]
            median = statistics.median(at_verdict) if at_verdict else float("nan")
            n = args.fleets
            print(
                f"| {rule} | {case} | {wrong_rb}/{n} = {wrong_rb / n:.1%} "
                f"| {wrong_pr}/{n} = {wrong_pr / n:.1%} "
                f"| {'-' if equal else f'{right}/{n} = {right / n:.1%}'} "
                f"| {counts['inconclusive']}/{n} | {median:.0f} "
                f"| {time.perf_counter() - started:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
