"""Where the daemon's K candidates come from: the engineer model, or the offline template
teacher (the embedded default before any engineer is trained). Both give EngineerSamples, so
what follows (parse, static checks, canary, GRPO group) does not care which it was."""

from __future__ import annotations

from typing import Protocol

from harness_r1.contracts import FailurePacket
from harness_r1.trainer.engineer import DEFAULT_MAX_NEW_TOKENS, EngineerBackend, EngineerSample
from harness_r1.trainer.prompt import engineer_messages


class Proposer(Protocol):
    name: str

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]: ...


class TemplateProposer:
    """The template teacher (no model): varied, signal-driven patches in the output format."""

    name = "template"

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        from harness_r1.trainer.teacher import TemplateTeacher

        texts = TemplateTeacher().propose(packet, k, seed)
        return [EngineerSample(text=t, tokens_exact=False) for t in texts]


class EngineerProposer:
    """An engineer backend (transformers + adapter, OpenAI-compatible HTTP, vLLM)."""

    def __init__(
        self,
        backend: EngineerBackend,
        temperature: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> None:
        self.backend = backend
        self.name = backend.model_id
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        return self.backend.propose(
            engineer_messages(packet),
            k,
            temperature=self.temperature,
            seed=seed,
            max_new_tokens=self.max_new_tokens,
        )
