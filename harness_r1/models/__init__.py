"""Model backends: the Policy protocol and every engine and client that implements it.

Why its own package: the frozen target (the harness runtime's policies) and the engineer (the
trainer) run on the same models, so they share one way to load them (embedded GGUFs converted
once, checkpoint directories, the deployed agent's merged adapter), one dtype choice for the
host's CPU, one set of decoding kernels (prefix cache, lockstep decode, grouped-query
attention) and the one OpenAI-compatible client. Neither the runtime nor the trainer owns them:
both import them from here, and this package imports neither (the layout allows it `contracts`
alone).

Public names load on first use (`harness_r1.exports`): the lockstep decoding kernels
(`left_pad_stack`, `row_cache`) import torch at load, and a command that never decodes never
pays for torch.

Modules:
- backends.py: Which backend a model name means, for targets (`build_policy`) and engineers
  (`trainer.engineer.build_engineer`) alike: one resolution and one error, so `--policy` ...
- base.py: The frozen target as the runtime sees it: chat messages in, text out, in batches
- cpu.py: Which number format the embedded target computes in on this host
- deployed.py: The deployed agent: the embedded base model with a shipped LoRA adapter merged
  into it (the adapter and its manifest: adapters/)
- gguf_tokenizer.py: A SentencePiece tokenizer rebuilt from a GGUF's vocabulary, for models whose
  GGUF tokenizer transformers converts wrongly
- gqa_attention.py: Grouped-query attention over a masked cache without copying the key/value
  cache
- kv_lockstep.py: Decode the requests of one lockstep batch together, each prompt read with its
  own prefix cache
- local_models.py: Locate the embedded models and convert a GGUF once into a plain local
  checkpoint
- openai_http.py: OpenAI-compatible `/v1/chat/completions` (vLLM's `vllm serve`, ...): the one
  client, and the frozen target behind it
- prefix_cache.py: Reuse of attention key/value caches across turns that share a token prefix
- transformers_backend.py: Frozen target on transformers: batched generation for episodes that
  run in lockstep
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.models.backends import Backend, resolve_backend
    from harness_r1.models.base import (
        ChatMessage,
        Generation,
        GenerationRequest,
        Policy,
        PolicyError,
        SamplingConfig,
    )
    from harness_r1.models.cpu import BF16_FLAGS, choose_dtype, cpu_flags
    from harness_r1.models.deployed import (
        DEFAULT_TARGET,
        DEPLOYED,
        ShippedAgent,
        file_sha256,
        merged_checkpoint,
    )
    from harness_r1.models.kv_lockstep import left_pad_stack, row_cache
    from harness_r1.models.local_models import (
        EMBEDDED,
        align_turn_tokens,
        checkpoint_version,
        converted_checkpoint,
        turn_stop_ids,
    )
    from harness_r1.models.openai_http import (
        ChatCompletionsClient,
        OpenAIChatPolicy,
        retryable_http_error,
    )
    from harness_r1.models.prefix_cache import PrefixCacheStore
    from harness_r1.models.transformers_backend import (
        TransformersPolicy,
        copy_kv_prefix,
        crop_kv_cache,
    )

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "BF16_FLAGS",
    "Backend",
    "ChatCompletionsClient",
    "ChatMessage",
    "DEFAULT_TARGET",
    "DEPLOYED",
    "EMBEDDED",
    "Generation",
    "GenerationRequest",
    "OpenAIChatPolicy",
    "Policy",
    "PolicyError",
    "PrefixCacheStore",
    "SamplingConfig",
    "ShippedAgent",
    "TransformersPolicy",
    "align_turn_tokens",
    "checkpoint_version",
    "choose_dtype",
    "converted_checkpoint",
    "copy_kv_prefix",
    "cpu_flags",
    "crop_kv_cache",
    "file_sha256",
    "left_pad_stack",
    "merged_checkpoint",
    "resolve_backend",
    "retryable_http_error",
    "row_cache",
    "turn_stop_ids",
]
