"""How the daemon is put together: what happens to the engineer after a GRPO update."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_rig import ReferenceEngineer

from harness_r1.daemon.grpo_job import EngineerVersions
from harness_r1.daemon.loop import ImprovementLoop, TaskIndex
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.store import StateStore
from harness_r1.daemon.wiring import _engineer_reloader
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.models.local_models import EMBEDDED, converted_checkpoint
from harness_r1.trainer.versions import publish_version, versions_dir

ARTIFACTS = "engineer-artifacts"


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


@pytest.fixture
def engineer_cache(tmp_path: Path) -> Path:
    """A daemon cache holding the converted SmolLM2 (linked from the shared cache) and one
    real published LoRA version, v0001."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    shared = converted_checkpoint(EMBEDDED["smollm2"])
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / shared.name).symlink_to(shared)

    def write(directory: Path) -> None:
        base = AutoModelForCausalLM.from_pretrained(str(shared))
        get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(directory)

    assert publish_version(cache / ARTIFACTS, write, {"kind": "test"}).version == "v0001"
    return cache


@pytest.mark.integration
def test_a_new_version_is_loaded_and_swapped_in(tmp_path: Path, engineer_cache: Path) -> None:
    loop = _loop(tmp_path)
    settings = Settings(cache=engineer_cache, loop={"engineer_backend": "smollm2"})
    name = _engineer_reloader(settings, loop)("v0001")
    assert name is not None and "v0001" in name and loop.proposer.name == name


@pytest.mark.integration
def test_a_version_that_fails_to_load_keeps_the_running_engineer(
    tmp_path: Path, engineer_cache: Path
) -> None:
    loop = _loop(tmp_path)
    broken = versions_dir(engineer_cache / ARTIFACTS) / "v0002"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{not json")
    settings = Settings(cache=engineer_cache, loop={"engineer_backend": "smollm2"})
    assert _engineer_reloader(settings, loop)("v0002") is None
    assert loop.proposer.name == "reference-double"


def test_every_daemon_picks_up_a_version_another_one_published(tmp_path: Path) -> None:
    """EngineerVersions.refresh: the newest version on disk is loaded once; a failed load is
    tried again at the next check; nothing happens while the loaded one is the newest."""
    root = tmp_path / ARTIFACTS
    loads: list[str] = []
    answers = {"v0002": None, "v0003": "engineer@v0003"}

    def reload(version: str) -> str | None:
        loads.append(version)
        return answers.get(version)

    for version in ("v0001",):
        (versions_dir(root) / version).mkdir(parents=True)
    versions = EngineerVersions(root, reload, loaded="v0001")
    assert versions.refresh() is None and loads == []  # v0001 is what runs
    (versions_dir(root) / "v0002").mkdir()  # published by the daemon that trained it
    assert versions.refresh() is None and versions.loaded == "v0001"  # failed to load
    assert versions.refresh() is None and loads == ["v0002", "v0002"]  # tried again
    (versions_dir(root) / "v0003").mkdir()
    assert versions.refresh() == "engineer@v0003" and versions.loaded == "v0003"
    assert versions.refresh() is None and loads == ["v0002", "v0002", "v0003"]


@pytest.mark.integration
def test_a_second_daemon_loads_the_published_version_at_its_next_check(
    tmp_path: Path, engineer_cache: Path
) -> None:
    loop = _loop(tmp_path)
    settings = Settings(cache=engineer_cache, loop={"engineer_backend": "smollm2"})
    versions = EngineerVersions(
        engineer_cache / ARTIFACTS, _engineer_reloader(settings, loop), loaded=None
    )
    name = versions.refresh()  # v0001, published by "another daemon" (the fixture)
    assert name is not None and "v0001" in name and loop.proposer.name == name
    assert versions.loaded == "v0001" and versions.refresh() is None
