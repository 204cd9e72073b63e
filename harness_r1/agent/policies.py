"""The operator's own model as the runtime's `Policy`: a plain function, or an
OpenAI-compatible endpoint.

Why adapters and not "implement the protocol": most agents already have a function that maps a
chat to a reply (their own client, a rules engine, a call into another service); asking for
`model_id`, `version`, `max_batch` and batched `generate` first would make embedding harder
than it needs to be. The adapter keeps the runtime's contract all the same: whatever the
function raises or returns that is not text becomes a `PolicyError` (infrastructure, never an
agent outcome), so a broken model is never recorded as a failed episode and never reaches the
daemon's failure batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from harness_r1.models import (
    ChatMessage,
    Generation,
    GenerationRequest,
    Policy,
    PolicyError,
    SamplingConfig,
)

if TYPE_CHECKING:
    import httpx

    from harness_r1.models import OpenAIChatPolicy

#: What an operator may hand over as a policy: the runtime's protocol, or a function that
#: reads the chat so far (system prompt, first turn, recent exchanges) and returns the reply.
Responder = Callable[[list[ChatMessage]], str]
PolicyLike = Policy | Responder


class CallablePolicy:
    """A function `messages -> reply` as a frozen target. Requests of a lockstep batch are
    answered one after another, in order (a function that can serve several at once is
    better wrapped as a `Policy` of its own)."""

    def __init__(
        self,
        respond: Responder,
        *,
        model_id: str | None = None,
        version: str = "1",
        max_batch: int = 1,
    ) -> None:
        if not callable(respond):
            raise TypeError(f"a policy function must be callable, got {type(respond).__name__}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.respond = respond
        self.model_id = model_id or _name_of(respond)
        self.version = version
        self.max_batch = max_batch

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return [self._one(request) for request in requests]

    def _one(self, request: GenerationRequest) -> Generation:
        # a copy: the function may edit what it reads without touching the episode's history
        messages = [dict(message) for message in request.messages]
        try:
            text = self.respond(messages)
        except PolicyError:
            raise
        except Exception as err:  # noqa: BLE001 - the operator's code: any failure is the model's
            raise PolicyError(
                f"policy {self.model_id!r} raised {type(err).__name__}: {err}"
            ) from err
        if not isinstance(text, str):
            raise PolicyError(
                f"policy {self.model_id!r} returned {type(text).__name__}, not the reply's text"
            )
        # the function reports no usage: a word count stands in (marked, as for HTTP servers
        # that report none)
        return Generation(
            text=text, tokens=len(text.split()), meta={"tokens": "estimated from words"}
        )


def callable_policy(
    respond: Responder, *, model_id: str | None = None, version: str = "1", max_batch: int = 1
) -> CallablePolicy:
    """`respond(messages) -> reply` as the runtime's Policy. `model_id` (default: the
    function's qualified name) and `version` name the target in every trajectory: the daemon
    batches failures, and the canary keeps baselines, per (model_id, version), so change
    `version` whenever the function's behaviour changes."""
    return CallablePolicy(respond, model_id=model_id, version=version, max_batch=max_batch)


# Why this size: the keyword options of the HTTP client it builds, passed through
def openai_policy(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    version: str = "1",
    temperature: float = 0.0,
    max_new_tokens: int = SamplingConfig.max_new_tokens,
    max_batch: int = 8,
    timeout_s: float = 60.0,
    stop: Sequence[str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> OpenAIChatPolicy:
    """A model behind any OpenAI-compatible `/v1/chat/completions` (vLLM, llama.cpp's
    server, a hosted API): timeouts, retries on transport errors, 429 and 5xx, and a batch
    sent as concurrent requests; a call that still fails is a `PolicyError`. `transport`: an
    httpx transport of your own (a proxy, client certificates, a stand-in server)."""
    from harness_r1.models import OpenAIChatPolicy  # httpx and tenacity: only when asked for

    return OpenAIChatPolicy(
        base_url,
        model,
        api_key=api_key,
        version=version,
        sampling=SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens),
        max_batch=max_batch,
        timeout_s=timeout_s,
        stop=stop,
        transport=transport,
    )


def as_policy(policy: PolicyLike | object) -> Policy:
    """A Policy as it is; a plain function through `callable_policy`; anything else refused
    here, at build time, rather than at the first episode."""
    if all(hasattr(policy, name) for name in ("generate", "model_id", "version", "max_batch")):
        return cast(Policy, policy)
    if callable(policy):
        return callable_policy(cast(Responder, policy))
    raise TypeError(
        f"a policy is a harness_r1.models.Policy or a function messages -> text, got "
        f"{type(policy).__name__}"
    )


def _name_of(function: Any) -> str:
    """The model id a bare function gets: its qualified name (so two functions never share
    a baseline by accident)."""
    name = getattr(function, "__qualname__", None) or type(function).__name__
    return str(name).replace("<", "").replace(">", "")
