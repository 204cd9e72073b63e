"""How the daemon is put together: what happens to the engineer after a GRPO update."""

from __future__ import annotations

from pathlib import Path

from daemon_rig import ReferenceEngineer

from harness_r1.daemon.loop import ImprovementLoop, TaskIndex
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.store import StateStore
from harness_r1.daemon.wiring import _engineer_reloader
from harness_r1.deploy.registry import OverlayRegistry


def _loop(tmp_path: Path) -> ImprovementLoop:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    return ImprovementLoop(
        StateStore(url),
        OverlayRegistry(url),
        ReferenceEngineer(),
        lambda env: None,
        TaskIndex(tmp_path),
    )


def test_a_backend_the_daemon_does_not_serve_is_not_swapped(tmp_path: Path) -> None:
    loop = _loop(tmp_path)
    remote = {"engineer_url": "http://127.0.0.1:9/v1", "engineer_model": "m"}
    for loop_settings in (
        {"engineer_backend": "template"},
        {"engineer_backend": "openai", **remote},
    ):
        settings = Settings(cache=tmp_path, loop=loop_settings)
        assert _engineer_reloader(settings, loop)("v0002") is None
    assert loop.proposer.name == "reference-double"


def test_a_version_that_fails_to_load_keeps_the_running_engineer(tmp_path: Path) -> None:
    loop = _loop(tmp_path)
    # vllm is a GPU-host extra, absent here: loading the new version fails for real
    settings = Settings(cache=tmp_path, loop={"engineer_backend": "vllm", "engineer_model": "x"})
    assert _engineer_reloader(settings, loop)("v0002") is None
    assert loop.proposer.name == "reference-double"
