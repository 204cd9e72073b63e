"""Stage sampling: the SFT engineer's held-out validity at each of SWEEP_TEMPERATURES.

It answers whether sampling rather than training holds validity back, and it chose the
temperature every engineer of the table samples at (TABLE_SAMPLING).
"""

from __future__ import annotations

from pathlib import Path

from .common import keep_results, weights_sha
from .sft import pooled_validity, sft_steps, sft_version, validity

#: the sampling sweep (stage "sampling"): the SFT engineer's held-out validity per temperature
SWEEP_TEMPERATURES = (0.0, 0.2, 0.5)


def run_sampling(envs: list[str], out: Path, log: Path, packets: int) -> None:
    """The SFT engineer's held-out validity at each of SWEEP_TEMPERATURES (`packets` per env,
    K each): does sampling, not training, hold validity back? Pooled with Wilson 95%."""
    version = sft_version(out)
    assert version is not None, "stage 4 (SFT) first"
    rows, name = [], f"sft-{weights_sha(version)[:8]}"  # results kept per weights
    for temperature in SWEEP_TEMPERATURES:
        per_env = {
            env: validity(env, version, name, out, log, temperature, packets) for env in envs
        }
        row = {"temperature": temperature, "steps": sft_steps(version), **pooled_validity(per_env)}
        rows.append(row)
        low, high = row["ci"]
        each = ", ".join(f"{env} {s['valid']}/{s['proposals']}" for env, s in per_env.items())
        print(f"temperature {temperature}: {row['valid']}/{row['proposals']} "
              f"[{low:.0%}, {high:.0%}] {each}")  # fmt: skip
    results = f"results-sampling-p{packets}.json"
    keep_results(results, rows, out)
