"""Frozen target agents (policies): the protocol and its backends.

Public names load on first use (`harness_r1.exports`): the lockstep decoding kernels
(`left_pad_stack`, `row_cache`) import torch at load, and a command that never decodes never
pays for torch.
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.harness.policies.backends import resolve_backend
    from harness_r1.harness.policies.base import (
        ChatMessage,
        Generation,
        GenerationRequest,
        Policy,
        PolicyError,
        SamplingConfig,
    )
    from harness_r1.harness.policies.cpu import BF16_FLAGS, choose_dtype, cpu_flags
    from harness_r1.harness.policies.deployed import (
        DEFAULT_TARGET,
        DEPLOYED,
        ShippedAgent,
        file_sha256,
    )
    from harness_r1.harness.policies.factory import PolicySpec, build_policy
    from harness_r1.harness.policies.kv_lockstep import left_pad_stack, row_cache
    from harness_r1.harness.policies.local_models import (
        EMBEDDED,
        align_turn_tokens,
        checkpoint_version,
        converted_checkpoint,
        turn_stop_ids,
    )
    from harness_r1.harness.policies.null import NULL_OUTPUT, NullPolicy
    from harness_r1.harness.policies.openai_http import ChatCompletionsClient, retryable_http_error
    from harness_r1.harness.policies.prefix_cache import PrefixCacheStore
    from harness_r1.harness.policies.scripted import ScriptedPolicy
    from harness_r1.harness.policies.shared import SharedPolicy
    from harness_r1.harness.policies.transformers_backend import (
        TransformersPolicy,
        copy_kv_prefix,
        crop_kv_cache,
    )

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "ChatCompletionsClient",
    "BF16_FLAGS",
    "ChatMessage",
    "DEFAULT_TARGET",
    "DEPLOYED",
    "EMBEDDED",
    "Generation",
    "GenerationRequest",
    "NULL_OUTPUT",
    "NullPolicy",
    "Policy",
    "PolicyError",
    "PolicySpec",
    "PrefixCacheStore",
    "SamplingConfig",
    "ScriptedPolicy",
    "SharedPolicy",
    "ShippedAgent",
    "TransformersPolicy",
    "align_turn_tokens",
    "build_policy",
    "checkpoint_version",
    "choose_dtype",
    "converted_checkpoint",
    "copy_kv_prefix",
    "cpu_flags",
    "crop_kv_cache",
    "file_sha256",
    "left_pad_stack",
    "resolve_backend",
    "retryable_http_error",
    "row_cache",
    "turn_stop_ids",
]
