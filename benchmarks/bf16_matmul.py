"""Is bf16 native on this CPU? Times one matrix product of the engineer's shape (SmolLM2-135M:
hidden 576, MLP 1536; 512 rows) in fp32, in bf16 and under bf16 autocast, alternating rounds,
one thread, and writes the medians and ratios with the CPU's bf16 flags.

Why: `--cpu-bf16` trains 1.39x as fast on an EPYC with AVX512-BF16 (BENCHMARKS.md, "Training in
bf16 on CPU"); where the CPU lacks those instructions torch emulates bf16, and
`trainer.runs.use_bf16` falls back to fp32. This measures what the fallback avoids.

    .venv/bin/python benchmarks/bf16_matmul.py --out benchmarks/results/bf16-matmul-HOST.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first processor's model name (the machine type where /proc/cpuinfo has none)."""
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.machine()


def time_product(a: object, b: object, repeats: int, autocast: bool = False) -> float:
    """Median seconds of `repeats` products a @ b (after two warm-up products)."""
    import torch

    def product() -> None:
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                a @ b  # type: ignore[operator]
        else:
            a @ b  # type: ignore[operator]

    for _ in range(2):
        product()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        product()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch

    from harness_r1.models import BF16_FLAGS, choose_dtype, cpu_flags

    torch.set_num_threads(1)
    torch.manual_seed(0)
    a, b = torch.randn(512, 576), torch.randn(576, 1536)
    runs: dict[str, list[float]] = {"fp32": [], "bf16": [], "autocast_bf16": []}
    for _ in range(args.rounds):
        runs["fp32"].append(time_product(a, b, args.repeats))
        runs["bf16"].append(time_product(a.bfloat16(), b.bfloat16(), args.repeats))
        runs["autocast_bf16"].append(time_product(a, b, args.repeats, autocast=True))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    result = {
        "cpu": cpu_model(),
        "bf16_flags": sorted(cpu_flags() & set(BF16_FLAGS)),
        "auto_choice": choose_dtype("auto").reason,
        "median_ms": {name: round(value * 1000, 3) for name, value in medians.items()},
        "ratio_to_fp32": {
            name: round(value / medians["fp32"], 2) for name, value in medians.items()
        },
        "rounds": args.rounds,
        "repeats": args.repeats,
        "torch": torch.__version__,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
