"""The frozen target as the runtime sees it: chat messages in, text out, in batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

ChatMessage = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy; otherwise sampling, seeded from the requests' seeds (how
    exactly is the backend's business: see each backend's docstring)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 96

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class GenerationRequest:
    messages: Sequence[ChatMessage]
    seed: int = 0


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int
    prompt_tokens: int = 0
    meta: dict[str, str] = field(default_factory=dict)


class PolicyError(RuntimeError):
    """The model backend failed (after retries): infrastructure, never an agent outcome."""


class Policy(Protocol):
    """A frozen target model. `generate` answers requests in order, one Generation each."""

    model_id: str
    version: str
    max_batch: int

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]: ...
