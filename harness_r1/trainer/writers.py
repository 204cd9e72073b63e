"""The one role "writes patches": K candidate patches for a failure packet, in the engineer's
output format (`<think>...</think><patch>SECTIONS</patch>`), as EngineerSamples.

Two kinds fill it: the template teacher (no model; the cold start's teacher and the daemon's
embedded default before any engineer is trained) and an engineer model behind a backend
(transformers + adapter, OpenAI-compatible HTTP, vLLM: `trainer.engineer.build_engineer`).
Everything downstream (parse, static checks, canary, dataset rows, GRPO groups) takes a
PatchWriter and does not care which it was.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from harness_r1.contracts import FailurePacket
from harness_r1.trainer.engineer import DEFAULT_MAX_NEW_TOKENS, EngineerBackend, EngineerSample
from harness_r1.trainer.prompt import engineer_messages
from harness_r1.trainer.prompt_config import PromptConfig
from harness_r1.trainer.teacher import TeacherConfig, TemplateTeacher


@runtime_checkable
class PatchWriter(Protocol):
    """`name` identifies the writer in logs, metrics and dataset provenance (the template
    teacher's "template", an engineer's model id)."""

    name: str

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]: ...


class TemplateWriter:
    """The template teacher: varied, signal-driven patches, deterministic in (packet, seed).
    Its samples carry no token ids (`tokens_exact=False`): nothing to replay in GRPO."""

    name = "template"

    def __init__(self, config: TeacherConfig | None = None) -> None:
        self.teacher = TemplateTeacher(config or TeacherConfig())

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        texts = self.teacher.propose(packet, k, seed)
        return [EngineerSample(text=text, tokens_exact=False) for text in texts]


class EngineerWriter:
    """An engineer backend prompted with the packet (`trainer.prompt.engineer_messages`)."""

    def __init__(
        self,
        backend: EngineerBackend,
        temperature: float = 1.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        prompt: PromptConfig | None = None,
    ) -> None:
        self.backend = backend
        self.prompt = prompt or PromptConfig()
        self.name = backend.model_id
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        return self.backend.propose(
            engineer_messages(packet, config=self.prompt),
            k,
            temperature=self.temperature,
            seed=seed,
            max_new_tokens=self.max_new_tokens,
        )
