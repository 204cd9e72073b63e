"""The deployed agent: the embedded base model with a shipped LoRA adapter merged into it.

Why shipped: the deployed agent is the frozen target every demo, eval, canary and daemon run
uses by default; it must be the same agent everywhere and cost nothing to get, so its adapter
(trained once from expert demonstrations, `harness-r1 train target --from-experts`) is a file
in this package, with a manifest that pins its digest, its base model's digest and the command
that rebuilt it. Loading checks both digests (a changed or swapped file is refused, never
served), then folds the adapter into the base's weights once (W + alpha/r * B @ A, in fp32) and
caches the merged checkpoint under the cache dir keyed by the adapter's digest: decoding then
runs on a plain checkpoint, at the base model's speed, without peft.

The adapter file: safetensors, tensors `<module>.lora_A` (r x in) and `<module>.lora_B`
(out x r) for each adapted linear layer, `<module>` named as in the base checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.models.local_models import (
    EMBEDDED,
    EmbeddedModel,
    checkpoint_version,
    converted_checkpoint,
    default_cache_dir,
)

ADAPTERS_DIR = Path(__file__).with_name("adapters")
MANIFEST_SUFFIX = ".json"
ADAPTER_SUFFIX = ".safetensors"


class AdapterRefused(ValueError):
    """The shipped adapter does not match its manifest, or was built on another base."""


@dataclass(frozen=True)
class ShippedAgent:
    """A shipped agent: `name` is its `--policy` name, `base` the EMBEDDED key of its base
    model, `model_id` what trajectories name it."""

    name: str
    base: str
    model_id: str
    directory: Path = ADAPTERS_DIR

    @property
    def adapter_file(self) -> Path:
        return self.directory / f"{self.name}{ADAPTER_SUFFIX}"

    @property
    def manifest_file(self) -> Path:
        return self.directory / f"{self.name}{MANIFEST_SUFFIX}"

    @property
    def base_model(self) -> EmbeddedModel:
        return EMBEDDED[self.base]

    def manifest(self) -> dict[str, Any]:
        if not self.manifest_file.is_file() or not self.adapter_file.is_file():
            raise AdapterRefused(
                f"the deployed agent {self.name!r} is not shipped here: "
                f"{self.adapter_file} and {self.manifest_file} are both needed"
            )
        manifest: dict[str, Any] = json.loads(self.manifest_file.read_text(encoding="utf-8"))
        return manifest


#: the default frozen target (issue 48): SmolLM2-135M-Instruct tuned on expert demonstrations
SMOLLM2_AGENT = ShippedAgent(
    name="smollm2-agent", base="smollm2", model_id="SmolLM2-135M-Instruct-agent"
)
DEPLOYED = {SMOLLM2_AGENT.name: SMOLLM2_AGENT}
DEFAULT_TARGET = SMOLLM2_AGENT.name


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_adapter(agent: ShippedAgent, base_checkpoint: Path) -> dict[str, Any]:
    """The manifest, once the adapter file's SHA-256 and the base checkpoint's version match
    what it pins; AdapterRefused naming both values otherwise."""
    manifest = agent.manifest()
    found = file_sha256(agent.adapter_file)
    if found != manifest.get("adapter_sha256"):
        raise AdapterRefused(
            f"{agent.adapter_file}: SHA-256 {found} is not the manifest's "
            f"{manifest.get('adapter_sha256')}; refusing to serve a changed adapter "
            f"(rebuild it: {manifest.get('rebuild', 'see the manifest')})"
        )
    base_version = checkpoint_version(base_checkpoint)
    if base_version != manifest.get("base_version"):
        raise AdapterRefused(
            f"the adapter {agent.name!r} was trained on base version "
            f"{manifest.get('base_version')}, but this base ({base_checkpoint.name}) is "
            f"{base_version}"
        )
    return manifest


def merged_checkpoint(agent: ShippedAgent, cache_dir: Path | None = None) -> Path:
    """The base with the adapter folded in, as a plain checkpoint directory (built once per
    adapter digest; the digests are checked on every call, the merge only on the first)."""
    base_dir = converted_checkpoint(agent.base_model, cache_dir)
    manifest = check_adapter(agent, base_dir)
    digest = str(manifest["adapter_sha256"])[:12]
    target = (cache_dir or default_cache_dir()) / "models" / f"{agent.name}-{digest}"
    if (target / "config.json").is_file():
        return target
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _write_merged(base_dir, agent.adapter_file, tmp)
    tmp.rename(target)  # atomic: a half-written checkpoint is never taken as whole
    return target


def _write_merged(base_dir: Path, adapter_file: Path, out: Path) -> None:
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    modules = dict(model.named_modules())
    with safe_open(str(adapter_file), framework="pt") as adapter:
        meta = adapter.metadata() or {}
        scale = float(meta["lora_alpha"]) / float(meta["lora_r"])
        names = sorted({key.rsplit(".", 1)[0] for key in adapter.keys()})  # noqa: SIM118
        with torch.no_grad():
            for name in names:
                if name not in modules:
                    raise AdapterRefused(f"the adapter adapts {name!r}, which the base lacks")
                low_a = adapter.get_tensor(f"{name}.lora_A").float()
                low_b = adapter.get_tensor(f"{name}.lora_B").float()
                weight = modules[name].weight
                weight += scale * (low_b @ low_a)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(out))
