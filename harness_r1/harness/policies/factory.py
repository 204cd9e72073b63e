"""Build a policy from a plain spec (the CLI and the daemon read settings, then call this)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness_r1.harness.policies.base import Policy, SamplingConfig


@dataclass(frozen=True)
class PolicySpec:
    """`kind`: "smollm2" (embedded transformers), "openai" (HTTP), or a local checkpoint dir."""

    kind: str = "smollm2"
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    max_batch: int = 8
    sampling: SamplingConfig = SamplingConfig()
    timeout_s: float = 60.0
    cache_dir: Path | None = None  # converted checkpoints of embedded models
    # transformers only: answer one request at a time reusing the key/value cache of the
    # longest prompt prefix seen (see prefix_cache.py); wins on long multi-turn prompts
    prefix_cache: bool = False


def build_policy(spec: PolicySpec) -> Policy:
    if spec.kind == "openai":
        if not spec.base_url or not spec.model:
            raise ValueError("the openai policy needs --base-url and --model")
        from harness_r1.harness.policies.openai_http import OpenAIChatPolicy

        return OpenAIChatPolicy(
            spec.base_url,
            spec.model,
            api_key=spec.api_key,
            sampling=spec.sampling,
            max_batch=spec.max_batch,
            timeout_s=spec.timeout_s,
        )
    from harness_r1.harness.policies.local_models import EMBEDDED
    from harness_r1.harness.policies.transformers_backend import TransformersPolicy

    if spec.kind in EMBEDDED:
        return TransformersPolicy.embedded(
            spec.kind,
            spec.cache_dir,
            sampling=spec.sampling,
            max_batch=spec.max_batch,
            prefix_cache=spec.prefix_cache,
        )
    checkpoint = Path(spec.kind)
    if (checkpoint / "config.json").is_file():
        return TransformersPolicy(
            checkpoint,
            model_id=checkpoint.name,
            sampling=spec.sampling,
            max_batch=spec.max_batch,
            prefix_cache=spec.prefix_cache,
        )
    raise ValueError(
        f"unknown policy {spec.kind!r}; use one of {', '.join(EMBEDDED)}, 'openai' or a "
        "directory holding a transformers checkpoint (config.json)"
    )
