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


def test_checkpoints_of_the_same_name_are_different_versions(tmp_path: Path) -> None:
    """Two tuned targets both called `tuned-v0001` must not share canary baselines."""
    from harness_r1.models.local_models import checkpoint_version

    versions = []
    for root, weights in (("a", b"1" * 10), ("b", b"2" * 11), ("c", b"2" * 11)):
        checkpoint = tmp_path / root / "tuned-v0001"
        checkpoint.mkdir(parents=True)
        (checkpoint / "config.json").write_text('{"model_type": "llama"}')
        (checkpoint / "model.safetensors").write_bytes(weights)
        versions.append(checkpoint_version(checkpoint))
    assert versions[0] != versions[1]
    assert len(versions[0]) == 12
    (tmp_path / "c" / "tuned-v0001" / "config.json").write_text('{"model_type": "gemma"}')
    assert checkpoint_version(tmp_path / "c" / "tuned-v0001") != versions[1]
