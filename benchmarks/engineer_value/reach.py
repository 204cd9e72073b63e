"""Stage reach: what the trained engineers sample at all, K=16 at temperature 1.0 on the
held-out packets (validity only), counted by template. A call no sample names validly is one
GRPO's reward cannot reach, which is why RFT exists.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from .common import (
    committed_results,
    heldout_runs,
    incumbent_digest,
    incumbent_on,
    keep_results,
    run,
)
from .engineers import adapter_weights, engineer_args, engineer_tag
from .settings import BATCH, HR, SPLITS, option_value

#: the reach probe: many samples at GRPO's high end of temperature, no canary
REACH_SAMPLING = ["-k", "16", "--temperature", "1.0", "--seed", "0", "--max-new-tokens", "512"]


def template_counts(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A report's samples counted by the template they name (`templates: NAME` in the
    description line; "code" for a patch of code, "no patch" for neither), valid and invalid."""
    counts: dict[str, Counter[str]] = {
        "valid_by_template": Counter(),
        "invalid_by_template": Counter(),
    }
    for packet in report["packets"]:
        for sample in packet["samples"]:
            found = re.search(r"templates: ([A-Za-z0-9_]+)", sample["text"])
            name = (
                found.group(1)
                if found
                else "code"
                if "# === hook" in sample["text"]
                else "no patch"
            )
            counts["valid_by_template" if sample["valid"] else "invalid_by_template"][name] += 1
    return {kind: dict(sorted(named.items())) for kind, named in counts.items()}


def run_reach(envs: list[str], out: Path, log: Path, names: tuple[str, ...]) -> None:
    """What the trained engineers of `names` (SFT, SFT+GRPO, RFT) can sample at all on the
    env's held-out packets: REACH_SAMPLING (K=16 at temperature 1.0), validity only, counted
    by template. A call no sample names valid is one GRPO's reward cannot reach (issue 20:
    ALFWorld's winning `alfworld_take_place`, which the teacher finds and the engineers do
    not write at temperature 0.2). Merges per engineer into the committed results."""
    results: dict[str, dict[str, Any]] = {}
    for env in envs:
        results[env] = {}
        for name in (n for n in ("sft", "grpo", "rft") if n in names):
            args = engineer_args(name, out)
            if args is None:
                continue
            k = option_value(REACH_SAMPLING, "-k")
            temperature = option_value(REACH_SAMPLING, "--temperature")
            tag = engineer_tag(env, out, args)
            path = out / "reach" / f"{env}-{name}-{tag}-k{k}-t{temperature}.json"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                run([HR, "engineer", "evaluate", str(heldout_runs(env, out, log)), "--env", env,
                     "--split", SPLITS[env][1], *args, "--lean-prompt", *incumbent_on(env, out),
                     *REACH_SAMPLING, "--batch-size", str(BATCH), "--validity-only",
                     "--out", str(path)], log)  # fmt: skip
            report = json.loads(path.read_text())
            summary = report["summary"]
            results[env][name] = {
                "weights_sha256_12": adapter_weights(args),
                "incumbent_sha256": incumbent_digest(env, out),
                "sampling": REACH_SAMPLING,
                "packets": summary["packets"],
                "samples": summary["proposals"],
                "valid": summary["valid"],
                **template_counts(report),
            }
            print(f"{env} {name}: {summary['valid']}/{summary['proposals']} valid, "
                  f"{results[env][name]['valid_by_template']}")  # fmt: skip
    merged = committed_results("results-reach.json")
    for env, found in results.items():
        merged[env] = {**merged.get(env, {}), **found}
    keep_results("results-reach.json", merged, out)
