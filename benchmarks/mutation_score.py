"""The mutation score of the critical modules, per module, from `benchmarks/mutate.py`'s runs.

Reads each module's `build/mutate/<name>/results.txt` (`mutmut results --all true`) and the
reviewed equivalent mutants (`benchmarks/mutation_equivalent.txt`, one `name  reason` per line)
and prints a Markdown table: killed / (mutants - equivalent), with timeouts counted as killed
(the mutant made the tests hang, which the tests noticed), and the survivors that are left,
each with the reason it is left (`benchmarks/mutation_left.txt`, same format; "not reviewed"
when it has none).

    .venv/bin/python benchmarks/mutation_score.py [--survivors]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {"killed", "timeout"}
EQUIVALENT_FILE = Path(__file__).with_name("mutation_equivalent.txt")
LEFT_FILE = Path(__file__).with_name("mutation_left.txt")
BUILD = Path(__file__).resolve().parents[1] / "build" / "mutate"


def read_results(text: str) -> dict[str, str]:
    """`name: status` lines as printed by `mutmut results --all true`."""
    results = {}
    for line in text.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("harness_r1."):
            results[name] = status.strip()
    return results


def read_equivalent(path: Path) -> dict[str, str]:
    """Reviewed equivalent mutants: `name  reason` (blank lines and `#` comments ignored)."""
    if not path.is_file():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            rows[name] = reason.strip()
    return rows


def module_of(mutant: str) -> str:
    """`harness_r1.sandbox.gate.x_decide__mutmut_9` -> `harness_r1.sandbox.gate`."""
    return mutant.rsplit(".", 1)[0]


def table(results: dict[str, str], equivalent: dict[str, str]) -> tuple[str, list[str]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    left = []
    for name, status in sorted(results.items()):
        module = module_of(name)
        if name in equivalent and status not in KILLED:
            counts[module]["equivalent"] += 1
            continue
        counts[module][status] += 1
        if status not in KILLED:
            left.append(f"{name}: {status}")
    lines = [
        "| module | mutants | killed | equivalent | left | score |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    total: Counter[str] = Counter()
    for module in sorted(counts):
        total.update(counts[module])
        lines.append(_row(module, counts[module]))
    lines.append(_row("**all**", total))
    return "\n".join(lines), left


def _row(label: str, c: Counter[str]) -> str:
    mutants = sum(c.values())
    killed = sum(c[s] for s in KILLED)
    left = mutants - killed - c["equivalent"]
    judged = mutants - c["equivalent"]
    score = f"{100 * killed / judged:.1f}%" if judged else "-"
    return f"| {label} | {mutants} | {killed} | {c['equivalent']} | {left} | {score} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--survivors", action="store_true", help="also list what is left")
    args = parser.parse_args()
    results: dict[str, str] = {}
    for path in sorted(BUILD.glob("*/results.txt")):
        results.update(read_results(path.read_text()))
    if not results:
        sys.exit(f"no results under {BUILD}: run benchmarks/mutate.py first")
    markdown, left = table(results, read_equivalent(EQUIVALENT_FILE))
    print(markdown)
    if args.survivors:
        why = read_equivalent(LEFT_FILE)
        rows = [f"{row}  ({why.get(row.rpartition(': ')[0], 'not reviewed')})" for row in left]
        print("\nLeft:\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
