"""Frozen target agents (policies): the protocol and its backends."""

from harness_r1.harness.policies.base import (
    ChatMessage,
    Generation,
    GenerationRequest,
    Policy,
    PolicyError,
    SamplingConfig,
)
from harness_r1.harness.policies.null import NULL_OUTPUT, NullPolicy
from harness_r1.harness.policies.scripted import ScriptedPolicy

__all__ = [
    "NULL_OUTPUT",
    "NullPolicy",
    "ChatMessage",
    "Generation",
    "GenerationRequest",
    "Policy",
    "PolicyError",
    "SamplingConfig",
    "ScriptedPolicy",
]
