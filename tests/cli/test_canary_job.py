"""`harness-r1 canary --on`: hand-given patch files become the incumbent chain candidates are
composed onto (the runner itself is tested in tests/sandbox/test_canary.py)."""

from __future__ import annotations

from pathlib import Path

from harness_r1.cli.jobs.canary import load_incumbent
from harness_r1.contracts import HookName
from harness_r1.sandbox.canary import BASE_INCUMBENT

REFERENCE = Path(__file__).resolve().parents[2] / "harness_r1" / "sandbox" / "reference_patches"


def test_no_on_files_is_the_base_harness() -> None:
    assert load_incumbent([], "dbbench") is BASE_INCUMBENT


def test_on_files_compose_into_the_incumbent_oldest_first(tmp_path: Path) -> None:
    hint = tmp_path / "hint.patch"
    hint.write_text(
        "# env: dbbench\n# === hook: post_feedback ===\n"
        "def hook(ctx, state):\n    return 'Check the column names.'\n"
    )
    incumbent = load_incumbent([REFERENCE / "dbbench_lookup.patch", hint], "dbbench")
    assert [link.overlay_id for link in incumbent.links] == ["dbbench_lookup", "hint"]
    assert incumbent.overlay_id == "on-dbbench_lookup-hint"
    assert incumbent.patch is not None
    code = incumbent.patch.code_for(HookName.POST_FEEDBACK)
    assert code is not None and "def link1():" in code and "def link2():" in code
