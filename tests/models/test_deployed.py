"""The deployed agent's shipped adapter: checked against its manifest at load (a changed file or
another base is refused, never served) and merged into the base's weights exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness_r1.models.deployed import (
    SMOLLM2_AGENT,
    AdapterRefused,
    ShippedAgent,
    check_adapter,
    file_sha256,
    merged_checkpoint,
)
from harness_r1.models.local_models import (
    SMOLLM2,
    checkpoint_version,
    converted_checkpoint,
)

MAX_SHIPPED_BYTES = 20 * 1024 * 1024


@pytest.fixture(scope="module")
def base_dir() -> Path:
    return converted_checkpoint(SMOLLM2)


def _shipped_copy(tmp_path: Path) -> ShippedAgent:
    agent = ShippedAgent(SMOLLM2_AGENT.name, "smollm2", "test-agent", tmp_path / "adapters")
    agent.directory.mkdir()
    shutil.copy(SMOLLM2_AGENT.adapter_file, agent.adapter_file)
    shutil.copy(SMOLLM2_AGENT.manifest_file, agent.manifest_file)
    return agent


def test_the_shipped_adapter_is_one_small_file_matching_its_manifest(base_dir: Path):
    assert SMOLLM2_AGENT.adapter_file.stat().st_size <= MAX_SHIPPED_BYTES
    manifest = check_adapter(SMOLLM2_AGENT, base_dir)
    assert manifest["adapter_sha256"] == file_sha256(SMOLLM2_AGENT.adapter_file)
    assert manifest["base_version"] == checkpoint_version(base_dir)
    assert manifest["rebuild"].startswith("harness-r1 train target --from-experts")


def test_a_changed_adapter_is_refused(tmp_path: Path, base_dir: Path):
    agent = _shipped_copy(tmp_path)
    data = bytearray(agent.adapter_file.read_bytes())
    data[-1] ^= 0x01  # one bit of one weight
    agent.adapter_file.write_bytes(bytes(data))
    with pytest.raises(AdapterRefused, match="SHA-256"):
        merged_checkpoint(agent, tmp_path / "cache")
    assert not (tmp_path / "cache" / "models").exists() or not any(
        p.name.startswith(agent.name) for p in (tmp_path / "cache" / "models").iterdir()
    )


def test_an_adapter_trained_on_another_base_is_refused(tmp_path: Path, base_dir: Path):
    agent = _shipped_copy(tmp_path)
    manifest = json.loads(agent.manifest_file.read_text())
    manifest["base_version"] = "0" * 12
    agent.manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(AdapterRefused, match="base version"):
        check_adapter(agent, base_dir)


def test_a_missing_adapter_says_what_is_missing(tmp_path: Path):
    agent = ShippedAgent("nothing", "smollm2", "none", tmp_path)
    with pytest.raises(AdapterRefused, match="not shipped"):
        agent.manifest()


def test_the_merge_adds_the_scaled_low_rank_product_to_each_adapted_weight(
    tmp_path: Path, base_dir: Path
):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    agent = _shipped_copy(tmp_path)
    merged = merged_checkpoint(agent, tmp_path / "cache")
    base = load_file(str(base_dir / "model.safetensors"))
    after = load_file(str(merged / "model.safetensors"))
    with safe_open(str(agent.adapter_file), framework="pt") as adapter:
        meta = adapter.metadata()
        scale = float(meta["lora_alpha"]) / float(meta["lora_r"])
        name = "model.layers.3.mlp.down_proj"
        delta = (
            adapter.get_tensor(f"{name}.lora_B").float()
            @ adapter.get_tensor(f"{name}.lora_A").float()
        )
    expected = base[f"{name}.weight"].float() + scale * delta
    assert torch.allclose(after[f"{name}.weight"].float(), expected, atol=1e-5)
    assert torch.equal(after["model.norm.weight"], base["model.norm.weight"])  # not adapted
    assert merged_checkpoint(agent, tmp_path / "cache") == merged  # built once, then reused


def test_the_deployed_agent_is_the_default_target_everywhere():
    from harness_r1.cli.jobs.target import TargetSpec
    from harness_r1.cli.options import DEFAULT_TARGET as CLI_DEFAULT
    from harness_r1.daemon.settings import Settings
    from harness_r1.harness.policies.factory import PolicySpec
    from harness_r1.models.deployed import DEFAULT_TARGET

    assert DEFAULT_TARGET == SMOLLM2_AGENT.name == CLI_DEFAULT
    assert TargetSpec().kind == PolicySpec().kind == Settings().loop.target_policy == DEFAULT_TARGET


DATA_ROOT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
#: the splits the deployed agent is measured on (BENCHMARKS.md): none may feed its training
HELD_OUT = {
    "alfworld": ("valid_seen", "valid_train"),
    "dbbench": ("dev",),
    "webshop": ("fixed_heldout",),
}


@pytest.mark.skipif(not DATA_ROOT.is_dir(), reason="benchmark data not present")
def test_no_training_row_comes_from_a_held_out_split():
    from harness_r1.envs import get_suite

    envs = SMOLLM2_AGENT.manifest()["rows"]["envs"]
    assert sorted(envs) == ["alfworld", "dbbench", "webshop"]
    for env, entry in envs.items():
        suite = get_suite(env)
        assert suite.expert is not None and entry["splits"] == list(suite.expert.training_splits)
        trained = set(entry["task_ids"])
        train_ids = {t.task_id for t in suite.load_tasks(DATA_ROOT, entry["splits"][0])}
        held_ids = {t.task_id for s in HELD_OUT[env] for t in suite.load_tasks(DATA_ROOT, s)}
        assert trained and trained <= train_ids and not trained & held_ids, env


@pytest.mark.skipif(not DATA_ROOT.is_dir(), reason="benchmark data not present")
def test_the_manifest_names_the_tasks_the_experts_demonstrate():
    """The rows' task ids in the manifest are what the demonstrations give today (WebShop
    and DBBench, whole training splits: a few seconds)."""
    from harness_r1.envs import get_suite
    from harness_r1.trainer.target_experts import demonstrate, episode_rows

    envs = SMOLLM2_AGENT.manifest()["rows"]["envs"]
    for env in ("webshop", "dbbench"):
        suite = get_suite(env)
        tasks = suite.load_tasks(DATA_ROOT, envs[env]["splits"][0])
        rows = episode_rows(demonstrate(suite, DATA_ROOT, tasks, history_turns=6))
        assert sorted({r["metadata"]["task_id"] for r in rows}) == envs[env]["task_ids"]
