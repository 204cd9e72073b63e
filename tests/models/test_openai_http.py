"""The OpenAI-compatible backend against an httpx MockTransport (a stand-in for a server such
as `vllm serve`, which cannot run on these CPU machines)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from harness_r1.models.base import GenerationRequest, PolicyError, SamplingConfig
from harness_r1.models.openai_http import OpenAIChatPolicy

REQUEST = GenerationRequest([{"role": "user", "content": "hi"}], seed=3)


def completion(text: str, usage: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": text}}]}
    if usage is not None:
        body["usage"] = usage
    return body


def policy(handler: Any, **kwargs: Any) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(
        "http://stand-in", "m", transport=httpx.MockTransport(handler), timeout_s=1.0, **kwargs
    )


def test_sends_the_chat_request_and_reads_usage() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer k"
        seen.append(json.loads(request.content))
        return httpx.Response(
            200, json=completion(" go to desk 1 ", {"completion_tokens": 5, "prompt_tokens": 9})
        )

    p = policy(handler, api_key="k", sampling=SamplingConfig(temperature=0.7, max_new_tokens=12))
    [out] = p.generate([REQUEST])
    assert (out.text, out.tokens, out.prompt_tokens, out.meta) == ("go to desk 1", 5, 9, {})
    assert seen[0]["seed"] == 3 and seen[0]["max_tokens"] == 12 and seen[0]["temperature"] == 0.7
    assert seen[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_retries_5xx_and_429_then_succeeds() -> None:
    answers = iter(
        [httpx.Response(503), httpx.Response(429), httpx.Response(200, json=completion("ok"))]
    )
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return next(answers)

    [out] = policy(handler).generate([REQUEST])
    assert out.text == "ok" and len(calls) == 3
    assert out.meta == {"tokens": "estimated from words"}


def test_client_errors_are_not_retried() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(400, json={"error": "bad"})

    with pytest.raises(PolicyError, match="400"):
        policy(handler).generate([REQUEST])
    assert len(calls) == 1


def test_persistent_timeouts_become_a_policy_error() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(PolicyError):
        policy(handler, attempts=3).generate([REQUEST])
    assert len(calls) == 3


@pytest.mark.parametrize("body", [{"choices": []}, {"nope": 1}, completion("x", usage="weird")])
def test_malformed_answers(body: dict[str, Any]) -> None:
    p = policy(lambda request: httpx.Response(200, json=body))
    if body.get("choices"):
        assert p.generate([REQUEST])[0].text == "x"  # odd usage is ignored, not fatal
    else:
        with pytest.raises(PolicyError):
            p.generate([REQUEST])


def test_a_batch_keeps_request_order() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        content = json.loads(request.content)["messages"][0]["content"]
        return httpx.Response(200, json=completion(content.upper()))

    requests = [GenerationRequest([{"role": "user", "content": f"m{i}"}]) for i in range(6)]
    outs = policy(handler, max_batch=3).generate(requests)
    assert [o.text for o in outs] == [f"M{i}" for i in range(6)]


def test_one_client_speaks_chat_completions() -> None:
    """The target and the engineer share `ChatCompletionsClient`: no other module of the
    package posts to `/v1/chat/completions` with retries of its own."""
    import ast
    from pathlib import Path

    import harness_r1

    root = Path(harness_r1.__file__).parent
    speaking = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == "/v1/chat/completions"
    )
    assert speaking == ["models/openai_http.py"]
