"""A deterministic policy for tests and dry runs (a test double for a model, named as such).

It answers from a function of the conversation, so hook and runtime tests can assert exact
episodes without a model. It ships in the package like mini-swe-agent's deterministic models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness_r1.models import ChatMessage, Generation, GenerationRequest

Responder = Callable[[Sequence[ChatMessage]], str]


class ScriptedPolicy:
    model_id = "scripted"
    version = "1"

    def __init__(self, responder: Responder | Sequence[str], max_batch: int = 64) -> None:
        self.max_batch = max_batch
        self.calls = 0
        if callable(responder):
            self._respond: Responder = responder
        else:
            replies = list(responder)

            def by_turn(messages: Sequence[ChatMessage]) -> str:
                turn = sum(1 for m in messages if m["role"] == "assistant")
                return replies[min(turn, len(replies) - 1)]

            self._respond = by_turn

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.calls += 1
        out = []
        for request in requests:
            text = self._respond(request.messages)
            out.append(Generation(text=text, tokens=len(text.split())))
        return out
