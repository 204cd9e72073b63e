"""The demo's findings as numbers and tables: the fleet's success on each harness it ran (with
Wilson 95% intervals), each round's candidates and gate decisions, the live guard, the
rollback, and the patch win rate as the daemon's /metrics endpoint reports it."""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from harness_r1.contracts import OriginCounts, Trajectory, format_share
from harness_r1.daemon.store import CandidateRow
from harness_r1.demo.options import DemoOptions, DemoResult, RoundResult
from harness_r1.harness import wilson_interval

WIN_RATE = "harness_r1_patch_win_rate"


@dataclass(frozen=True)
class Level:
    """The fleet's success on one harness (one fleet phase where every agent ran it)."""

    label: str
    harness: str
    successes: int
    episodes: int
    origins: OriginCounts = OriginCounts()  # the phase's steps by who decided the action

    @property
    def forced_share(self) -> float | None:
        return self.origins.measured_forced_share

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.episodes)

    def text(self) -> str:
        low, high = self.interval
        return f"{self.successes}/{self.episodes} = {self.rate:.0%} [{low:.0%}, {high:.0%}]"


def _level(label: str, harness: str, played: list[Trajectory]) -> Level:
    return Level(
        label,
        harness,
        sum(t.outcome.success for t in played),
        len(played),
        OriginCounts.total(t.origins for t in played),
    )


def candidate_cells(result: RoundResult, candidate_id: str) -> tuple[str, str]:
    """A candidate's forced share and patch-alone success as the tables show them."""
    forced, alone = result.attribution.get(candidate_id, (None, None))
    return format_share(forced), format_share(alone)


def levels(result: DemoResult) -> list[Level]:
    """base -> round 1 -> round 2 ...: round r's fleet phase ran the harness before round r;
    the last phase ran what the last round left live."""
    out = []
    for r in result.rounds:
        label = "base" if r.number == 1 else f"after round {r.number - 1}"
        out.append(_level(label, r.incumbent, r.fleet))
    if result.final:
        out.append(
            _level(f"after round {len(result.rounds)}", result.final_incumbent, result.final)
        )
    return out


def scrape_win_rate(url: str) -> dict[str, float]:
    """`harness_r1_patch_win_rate` by env, read over HTTP like Prometheus would."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    rates = {}
    for family in text_string_to_metric_families(text):
        if family.name == WIN_RATE:
            for sample in family.samples:
                if not math.isnan(sample.value):  # an env with no canaried candidate yet
                    rates[sample.labels.get("env", "")] = float(sample.value)
    return rates


def _delta(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


CANDIDATE_COLUMNS = (
    "round",
    "incumbent",
    "candidate",
    "status",
    "delta",
    "forced share",
    "patch alone",
    "gate",
    "overlay",
)


def candidate_row(r: RoundResult, row: CandidateRow) -> list[str]:
    """One candidate as the console and the report show it (CANDIDATE_COLUMNS)."""
    forced, alone = candidate_cells(r, row.candidate_id)
    return [
        str(r.number),
        r.incumbent,
        row.candidate_id,
        row.status,
        _delta(row.delta_success),
        forced,
        alone,
        row.gate_verdict or "-",
        row.overlay_id or "-",
    ]


def print_summary(console: Console, result: DemoResult, options: DemoOptions) -> None:
    success = Table(title=f"fleet success on {options.env} (same tasks and seeds each phase)")
    for column in ("stage", "harness", "success [Wilson 95%]", "forced share"):
        success.add_column(column)
    for level in levels(result):
        success.add_row(level.label, level.harness, level.text(), format_share(level.forced_share))
    console.print(success)

    rounds = Table(title="rounds: candidates (template teacher -> sandbox -> canary -> gate)")
    for column in CANDIDATE_COLUMNS:
        rounds.add_column(column)
    for r in result.rounds:
        if not r.candidates:
            rounds.add_row(
                str(r.number), r.incumbent, "-", r.note or "no candidates", "", "", "", "", ""
            )
        for row in r.candidates:
            rounds.add_row(*candidate_row(r, row))
    console.print(rounds)

    facts = Table(title="demo summary")
    facts.add_column("what")
    facts.add_column("value")
    for r in result.rounds:
        guard = r.guard
        if guard is None:
            facts.add_row(f"round {r.number}", r.note or "the gate promoted nothing")
            continue
        facts.add_row(
            f"round {r.number} live guard",
            f"{guard.overlay_id} on {len(guard.cohort)} agent(s): {guard.state} "
            f"({guard.decision or 'undecided'})",
        )
        if guard.propagation_s is not None:
            facts.add_row(
                f"round {r.number} promotion reached every agent", f"{guard.propagation_s:.1f} s"
            )
        if r.stale_batches:
            facts.add_row(f"round {r.number} stale batches", str(r.stale_batches))
    facts.add_row("settings", options.describe())
    for env, rate in sorted(result.win_rate.items()):
        facts.add_row(f"patch win rate ({env}, from /metrics)", f"{rate:.2f}")
    if result.rollback is not None:
        rb = result.rollback
        took = "not within the wait" if rb.propagation_s is None else f"{rb.propagation_s:.1f} s"
        facts.add_row("operator rollback", " ".join(rb.command))
        facts.add_row(f"rollback to {rb.to} reached every agent", took)
    for name, seconds in result.seconds.items():
        facts.add_row(f"time: {name}", f"{seconds:.0f} s")
    if result.note:
        facts.add_row("note", result.note)
    console.print(facts)
