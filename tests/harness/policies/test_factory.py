from __future__ import annotations

from pathlib import Path

import pytest

from harness_r1.harness.policies.factory import PolicySpec, build_policy


def test_openai_needs_url_and_model() -> None:
    with pytest.raises(ValueError, match="base-url"):
        build_policy(PolicySpec(kind="openai"))


def test_unknown_policy_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="smollm2"):
        build_policy(PolicySpec(kind=str(tmp_path / "no-checkpoint-here")))
