"""The demo's report in its run folder: `success.png` (the fleet's success by stage, Wilson 95%
intervals as error bars) and `report.html` (the same tables the console shows, with the plot).
matplotlib is imported here only, with its file-only backend."""

from __future__ import annotations

import html
from pathlib import Path

from harness_r1.contracts import format_share
from harness_r1.demo.options import DemoOptions, DemoResult
from harness_r1.demo.summary import CANDIDATE_COLUMNS, Level, candidate_row, levels


def write_report(result: DemoResult, options: DemoOptions) -> tuple[Path, Path]:
    plot = plot_success(levels(result), result.run_dir / "success.png", options.env)
    page = result.run_dir / "report.html"
    page.write_text(render_html(result, options, plot.name))
    return page, plot


def plot_success(stages: list[Level], path: Path, env: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    names = [
        f"{s.label}\n{s.harness}\n{s.successes}/{s.episodes}, forced {format_share(s.forced_share)}"
        for s in stages
    ]
    rates = [s.rate for s in stages]
    # clipped at 0: the interval's ends are floats and may sit a rounding error inside the rate
    lows = [max(0.0, s.rate - s.interval[0]) for s in stages]
    highs = [max(0.0, s.interval[1] - s.rate) for s in stages]
    axes.bar(range(len(stages)), rates, color="#4c72b0", alpha=0.8)
    axes.errorbar(
        range(len(stages)), rates, yerr=[lows, highs], fmt="none", ecolor="black", capsize=6
    )
    # the forced share beside each bar: how much of that success the hooks decided
    forced = [s.forced_share or 0.0 for s in stages]
    axes.plot(
        range(len(stages)),
        forced,
        "D",
        color="#dd8452",
        label="forced share of steps",
        clip_on=False,  # a share of 1.0 sits on the frame
        zorder=3,
    )
    axes.legend(loc="upper left", fontsize=8, framealpha=0.9)
    axes.set_xticks(range(len(stages)), names, fontsize=8)
    axes.set_ylim(0, 1)
    axes.set_ylabel("fleet success (Wilson 95% interval)")
    axes.set_title(f"{env}: success by round")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(result: DemoResult, options: DemoOptions, plot_name: str) -> str:
    stages = _table(
        ["stage", "harness", "success [Wilson 95%]", "forced share"],
        [[s.label, s.harness, s.text(), format_share(s.forced_share)] for s in levels(result)],
    )
    candidates = [candidate_row(r, row) for r in result.rounds for row in r.candidates]
    rounds = _table(list(CANDIDATE_COLUMNS), candidates)
    facts: list[list[str]] = []
    for r in result.rounds:
        if r.guard is not None:
            g = r.guard
            facts.append(
                [f"round {r.number} live guard", f"{g.overlay_id}: {g.state} ({g.decision})"]
            )
        elif r.note:
            facts.append([f"round {r.number}", r.note])
    for env, rate in sorted(result.win_rate.items()):
        facts.append([f"patch win rate ({env}, /metrics)", f"{rate:.2f}"])
    if result.rollback is not None:
        rb = result.rollback
        took = "-" if rb.propagation_s is None else f"{rb.propagation_s:.1f} s"
        facts.append(["operator rollback", " ".join(rb.command)])
        facts.append([f"rollback to {rb.to} reached every agent", took])
    facts += [[f"time: {k}", f"{v:.0f} s"] for k, v in result.seconds.items()]
    if result.note:
        facts.append(["note", result.note])
    settings = options.describe()
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>harness-r1 demo: {html.escape(options.env)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px}}
</style></head><body>
<h1>harness-r1 demo: {html.escape(options.env)}</h1>
<p>{html.escape(settings)}</p>
<h2>Fleet success by round</h2>
<img src="{html.escape(plot_name)}" alt="success by round">
{stages}
<h2>Candidates per round</h2>
{rounds}
<h2>Live guard, win rate, rollback, timings</h2>
{_table(["what", "value"], facts)}
<p>Run folder: {html.escape(str(result.run_dir))}; log: demo.log; settings: harness-r1.yaml
(use it with <code>harness-r1 --config</code> to inspect the registry).</p>
</body></html>
"""
