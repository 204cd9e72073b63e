"""One resolution of model names for targets and engineers."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_r1.models.backends import Backend, resolve_backend


def test_targets_and_engineers_resolve_the_same_names(tmp_path: Path) -> None:
    checkpoint = tmp_path / "my-model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    for role, remote in (("policy", ("openai",)), ("engineer", ("openai", "vllm"))):
        assert resolve_backend("smollm2", role, remote) == Backend("embedded", "smollm2")
        assert resolve_backend("openai", role, remote) == Backend("openai", "openai")
        found = resolve_backend(str(checkpoint), role, remote)
        assert found == Backend("checkpoint", "my-model", checkpoint)
    assert resolve_backend("vllm", "engineer", ("openai", "vllm")).family == "vllm"


def test_an_unknown_name_lists_what_this_role_accepts(tmp_path: Path) -> None:
    listed = r"unknown policy 'vllm'; use one of smollm2, gemma3, 'openai' or"
    with pytest.raises(ValueError, match=listed):
        resolve_backend("vllm", "policy", ("openai",))
    empty = tmp_path / "no-config"
    empty.mkdir()
    with pytest.raises(ValueError, match="'openai', 'vllm' or a directory holding"):
        resolve_backend(str(empty), "engineer", ("openai", "vllm"))
