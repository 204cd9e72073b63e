"""Stage headroom: the held-out success under the incumbent with the env's hand-written
reference patch on top (never trained on). An engineer's delta is bounded by this gap; where
it is nil, no engineer can show a gain on these tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import (
    committed_results,
    heldout_runs,
    heldout_target_runs,
    incumbent_on,
    keep_results,
    rate,
)
from .settings import REFERENCE


def reference_on_top(env: str, on: list[str], folder: Path) -> Path:
    """The env's reference patch as a link on the incumbent `on`: each hook the incumbent has
    is replaced (the reference's own logic, not chained after the incumbent's: that
    composition is over the static node budget on WebShop), the others added."""
    from harness_r1.contracts import HookMode
    from harness_r1.sandbox import REFERENCE_DIR, load_patch_file

    reference = load_patch_file(REFERENCE_DIR / f"{REFERENCE[env]}.patch")
    live = {hook.hook for hook in load_patch_file(Path(on[1]), env).hooks} if on else set()
    hooks = [
        hook.model_copy(update={"mode": HookMode.REPLACE}) if hook.hook in live else hook
        for hook in reference.hooks
    ]
    path = folder / f"{REFERENCE[env]}-on-{'incumbent' if on else 'base'}.json"
    path.write_text(reference.model_copy(update={"hooks": hooks}).model_dump_json())
    return path


def run_headroom(envs: list[str], out: Path, log: Path) -> None:
    """What a patch could still win on the held-out tasks: the target under the incumbent with
    the env's reference patch composed on top (a human-written harness fix, never shown to an
    engineer), beside the incumbent alone. An engineer's delta is bounded by this gap; where
    it is nil, no engineer can show a gain on these tasks."""
    results: dict[str, dict[str, Any]] = {}
    for env in envs:
        on = incumbent_on(env, out)
        deployed = "incumbent" if on else "base"  # ALFWorld's deployed harness is the base
        path = out / "headroom" / f"{env}-heldout-{deployed}+{REFERENCE[env]}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        reference = reference_on_top(env, on, path.parent)
        heldout_target_runs(env, [*on, "--on", str(reference)], path, log)
        results[env] = {
            deployed: rate(heldout_runs(env, out, log)),
            f"{deployed}+{REFERENCE[env]}": rate(path),
        }
    keep_results(
        "results-headroom.json", {**committed_results("results-headroom.json"), **results}, out
    )
    for env, rows in results.items():
        for condition, row in rows.items():
            low, high = row["ci"]
            print(
                f"| {env} | {condition} | {row['successes']}/{row['n']} [{low:.0%}, {high:.0%}] |"
            )
