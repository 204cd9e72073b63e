"""Build a policy from a plain spec (the CLI and the daemon read settings, then call this)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.models import Policy, SamplingConfig


@dataclass(frozen=True)
class PolicySpec:
    """`kind`: "smollm2-agent" (the deployed agent, models/deployed.py), "smollm2" or
    "gemma3" (embedded base models), "openai" (HTTP), or a local checkpoint dir."""

    kind: str = "smollm2-agent"
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    max_batch: int = 8
    sampling: SamplingConfig = SamplingConfig()
    timeout_s: float = 60.0
    cache_dir: Path | None = None  # converted checkpoints of embedded models
    # transformers only: read each prompt reusing the key/value cache of the longest prompt
    # prefix seen (see models/prefix_cache.py); wins on long multi-turn prompts
    prefix_cache: bool = True
    # transformers with the prefix cache: decode the requests of a call together
    # (models/kv_lockstep.py) rather than one at a time (the engine before issue 16)
    batched_decode: bool = True
    # transformers with lockstep decode and greedy sampling: tokens guessed by prompt lookup
    # and checked in the same forward pass (PromptLookup, models/kv_lockstep.py); 0 turns it
    # off
    draft_tokens: int = 4
    # transformers only: auto (bf16 where the CPU computes it natively, else fp32), float32,
    # bfloat16, int8 (harness_r1/models/cpu.py)
    dtype: str = "auto"


def build_policy(spec: PolicySpec) -> Policy:
    from harness_r1.models import DEPLOYED, resolve_backend

    if spec.kind in DEPLOYED:
        return _deployed_policy(spec)
    backend = resolve_backend(spec.kind, "policy", remote=("openai",))
    if backend.family == "openai":
        if not spec.base_url or not spec.model:
            raise ValueError("the openai policy needs --base-url and --model")
        from harness_r1.models import OpenAIChatPolicy

        return OpenAIChatPolicy(
            spec.base_url,
            spec.model,
            api_key=spec.api_key,
            sampling=spec.sampling,
            max_batch=spec.max_batch,
            timeout_s=spec.timeout_s,
        )
    from harness_r1.models import TransformersPolicy

    engine = _engine_options(spec)
    if backend.checkpoint is None:
        return TransformersPolicy.embedded(backend.name, spec.cache_dir, **engine)
    from harness_r1.models import checkpoint_version

    version = checkpoint_version(backend.checkpoint)
    return TransformersPolicy(backend.checkpoint, model_id=backend.name, version=version, **engine)


def _engine_options(spec: PolicySpec) -> dict[str, Any]:
    """How the transformers engine decodes, whichever checkpoint it serves."""
    return {
        "sampling": spec.sampling,
        "max_batch": spec.max_batch,
        "prefix_cache": spec.prefix_cache,
        "batched_decode": spec.batched_decode,
        "draft_tokens": spec.draft_tokens,
        "dtype": spec.dtype,
    }


def _deployed_policy(spec: PolicySpec) -> Policy:
    """A shipped agent (models/deployed.py): its merged checkpoint, named by its model id and
    versioned by its adapter's digest (trajectories and canary baselines keep it apart from
    the base model and from any other adapter)."""
    from harness_r1.models import DEPLOYED, TransformersPolicy, merged_checkpoint

    agent = DEPLOYED[spec.kind]
    checkpoint = merged_checkpoint(agent, spec.cache_dir)
    version = checkpoint.name.rsplit("-", 1)[-1]
    return TransformersPolicy(
        checkpoint, model_id=agent.model_id, version=version, **_engine_options(spec)
    )
