"""The operator's own model as a Policy (harness_r1.agent): a plain function through
`callable_policy`, an OpenAI-compatible endpoint through `openai_policy`, and `as_policy`
choosing between them. Whatever a function raises or returns that is not text is a
PolicyError, which the runtime treats as infrastructure (it propagates; no episode is recorded
as the agent's failure)."""

from __future__ import annotations

import json

import httpx
import pytest

from harness_r1.agent import (
    CallablePolicy,
    ChatMessage,
    GenerationRequest,
    Policy,
    PolicyError,
    Trajectory,
    as_policy,
    callable_policy,
    openai_policy,
)
from harness_r1.envs import default_data_root, get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies import ScriptedPolicy

CHAT: list[ChatMessage] = [
    {"role": "system", "content": "You shop."},
    {"role": "user", "content": "Available Actions:\nsearch[<your query>]"},
]


def test_a_function_answers_each_request_in_order() -> None:
    seen: list[list[ChatMessage]] = []

    def respond(messages: list[ChatMessage]) -> str:
        seen.append(messages)
        return f"Action: search[{len(seen)} words here]"

    policy = callable_policy(respond, model_id="rules", version="7")
    assert (policy.model_id, policy.version, policy.max_batch) == ("rules", "7", 1)
    out = policy.generate([GenerationRequest(CHAT, seed=1), GenerationRequest(CHAT, seed=2)])
    assert [g.text for g in out] == ["Action: search[1 words here]", "Action: search[2 words here]"]
    assert out[0].tokens == 4 and out[0].meta == {"tokens": "estimated from words"}
    assert seen == [CHAT, CHAT]


def test_the_function_reads_a_copy_of_the_conversation() -> None:
    """A function that edits what it reads cannot change the episode's history."""

    def vandal(messages: list[ChatMessage]) -> str:
        messages[1]["content"] = "gone"
        messages.append({"role": "user", "content": "more"})
        return "ok"

    request = GenerationRequest([dict(m) for m in CHAT])
    callable_policy(vandal).generate([request])
    assert list(request.messages) == CHAT


def test_an_exception_of_the_function_is_a_policy_error_with_its_cause() -> None:
    def broken(messages: list[ChatMessage]) -> str:
        raise ConnectionResetError("my backend went away")

    with pytest.raises(
        PolicyError, match="raised ConnectionResetError: my backend went away"
    ) as err:
        callable_policy(broken, model_id="mine").generate([GenerationRequest(CHAT)])
    assert isinstance(err.value.__cause__, ConnectionResetError)
    assert "'mine'" in str(err.value)


def test_a_policy_error_of_the_function_passes_as_it_is() -> None:
    original = PolicyError("rate limited, gave up")

    def limited(messages: list[ChatMessage]) -> str:
        raise original

    with pytest.raises(PolicyError) as err:
        callable_policy(limited).generate([GenerationRequest(CHAT)])
    assert err.value is original


@pytest.mark.parametrize("reply", [None, 42, b"bytes", ["Action: x"]])
def test_a_reply_that_is_not_text_is_a_policy_error(reply: object) -> None:
    policy = callable_policy(lambda messages: reply)  # type: ignore[arg-type,return-value]
    with pytest.raises(PolicyError, match=f"returned {type(reply).__name__}, not the reply"):
        policy.generate([GenerationRequest(CHAT)])


def test_the_adapter_refuses_what_it_cannot_call() -> None:
    with pytest.raises(TypeError, match="must be callable"):
        callable_policy("not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_batch"):
        callable_policy(lambda m: "", max_batch=0)


def test_as_policy_keeps_a_policy_wraps_a_function_and_refuses_the_rest() -> None:
    scripted = ScriptedPolicy(["Action: click[buy now]"])
    assert as_policy(scripted) is scripted

    def my_rules(messages: list[ChatMessage]) -> str:
        return "Action: click[buy now]"

    wrapped = as_policy(my_rules)
    assert isinstance(wrapped, CallablePolicy) and wrapped.respond is my_rules
    # the function's qualified name names the target: two functions never share a baseline
    assert wrapped.model_id.endswith("my_rules")
    assert as_policy(lambda m: "x").model_id.endswith("lambda")
    with pytest.raises(TypeError, match="a policy is a harness_r1.models.Policy or a function"):
        as_policy(3)


def test_openai_policy_speaks_to_an_openai_compatible_server() -> None:
    """The endpoint adapter with sampling as given; its HTTP failures are PolicyErrors (the
    server here is a transport that answers in the server's format, then fails)."""
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) > 1:
            return httpx.Response(400, json={"error": "bad request"})
        reply = {"choices": [{"message": {"content": " Action: click[buy now] "}}]}
        return httpx.Response(200, json={**reply, "usage": {"completion_tokens": 5}})

    policy = openai_policy(
        "http://model.internal:8000",
        "my-model",
        version="2024-06",
        max_new_tokens=32,
        transport=httpx.MockTransport(answer),
    )
    checked: Policy = policy
    (generation,) = checked.generate([GenerationRequest(CHAT, seed=3)])
    assert generation.text == "Action: click[buy now]" and generation.tokens == 5
    assert bodies[0]["model"] == "my-model" and bodies[0]["max_tokens"] == 32
    assert bodies[0]["temperature"] == 0.0 and bodies[0]["seed"] == 3
    assert (policy.model_id, policy.version) == ("my-model", "2024-06")
    with pytest.raises(PolicyError, match="chat completion failed"):
        policy.generate([GenerationRequest(CHAT)])
    policy.close()


def test_the_runtime_lets_a_policy_error_through_and_plays_on_afterwards() -> None:
    """The runtime's contract for a model failure: infrastructure, raised out of `run` (no
    trajectory says the agent failed); the same runtime plays the next run normally."""
    calls = {"n": 0}

    def flaky(messages: list[ChatMessage]) -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            raise TimeoutError("model server timed out")
        return "Action: search[lotion]"

    suite = get_suite("webshop")
    root = default_data_root()
    assert root is not None
    task = suite.load_tasks(root, "fixed_heldout")[0]
    runtime = HarnessRuntime(suite, callable_policy(flaky), root, RunConfig(max_steps=2))
    done: list[Trajectory] = []
    try:
        with pytest.raises(PolicyError, match="TimeoutError"):
            runtime.run([EpisodeSpec(task=task, seed=0, hooks=NoHooks())], on_done=done.append)
        assert done == []
        (trajectory,) = runtime.run([EpisodeSpec(task=task, seed=0, hooks=NoHooks())])
    finally:
        runtime.close()
    assert trajectory.outcome.steps == 2 and trajectory.target.model_id.endswith("flaky")
