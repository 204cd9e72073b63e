"""The engineer: prompt (derived from the sandbox's own tables), backends, proposal classes.

Test doubles, named as such: `ScriptedEngineer` returns fixed texts instead of a model;
`fake_vllm_server` is an httpx MockTransport handler standing in for a `vllm serve` endpoint;
`RoomEnv` is a two-command env used only to see the ctx the real runtime hands each hook.
The real SmolLM2 is loaded by the two tests marked integration.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness_r1.consumers.packets import PacketConfig, build_packet
from harness_r1.contracts import (
    ALLOWED_EFFECTS,
    FailurePacket,
    HookName,
    Outcome,
    Step,
    TargetRef,
    TaskRef,
    TaskSpec,
    Termination,
    Timings,
    Trajectory,
)
from harness_r1.envs.base import EnvSuite, StepResult
from harness_r1.harness import EpisodeSpec, HarnessRuntime, InProcessHooks, RunConfig
from harness_r1.harness.effects import MAX_EFFECT_TEXT, MAX_SKILLS, MAX_STATE_BYTES
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.hooklib import (
    ALLOWED_BUILTINS,
    CATCHABLE_EXCEPTIONS,
    RE_EXPORTS,
)
from harness_r1.sandbox.parse import parse_engineer_output, render_completion
from harness_r1.sandbox.static import check_patch
from harness_r1.sandbox.static_codes import BANNED_NAMES, Code
from harness_r1.sandbox.static_report import StaticLimits
from harness_r1.trainer import prompt as prompt_module
from harness_r1.trainer.engineer import (
    EngineerError,
    EngineerSample,
    EngineerSpec,
    OpenAIEngineer,
    TransformersEngineer,
    VLLMEngineer,
    build_engineer,
    load_adapter,
)
from harness_r1.trainer.prompt import (
    engineer_messages,
    engineer_prompt_text,
    system_prompt,
    template_menu,
)
from harness_r1.trainer.prompt_config import PromptConfig, hooks_without, limits_stated
from harness_r1.trainer.prompt_examples import SNAP_EXAMPLE, default_examples, reference_example
from harness_r1.trainer.prompt_meanings import (
    BANNED_CONSTRUCTS,
    EFFECT_MEANINGS,
    HOOK_EXTRA_CTX,
    HOOK_MEANINGS,
    NOT_CONSTRUCTS,
)
from harness_r1.trainer.propose import (
    classify,
    load_packet,
    proposals_json,
    propose_command,
    propose_patches,
)

ENVS = ("alfworld", "dbbench", "webshop", "newenv")
PROMPT_TOKEN_BUDGET = 1500
NOW = datetime(2026, 1, 1, tzinfo=UTC)
DB_INVALID = "Invalid action. Use `sql: <one SQL statement>` or `answer: [...]`."


# -- packets --------------------------------------------------------------------------------


def _trajectory(i: int, env: str = "dbbench") -> Trajectory:
    junk = f"I think the answer {i} is " + "very " * 30
    moves = [(junk, DB_INVALID)] * 3 + [(f"sql: SELECT c{i} FROM t", "[]")]
    steps = [
        Step(index=n, observation="obs", raw_output=a, action=a, feedback=f)
        for n, (a, f) in enumerate(moves)
    ]
    return Trajectory(
        trajectory_id=f"traj-{i:03d}",
        agent_id="agent",
        target=TargetRef(model_id="tiny", version="1"),
        harness_version="base",
        task=TaskRef(
            env=env,
            split="dev",
            task_id=f"task-{i}",
            task_type=["INSERT", "counting", "UPDATE"][i % 3],
            instruction=f"Question {i}? The name of this table is Tab {i}, and the headers of "
            "this table are A,B,C.",
            seed=0,
        ),
        steps=steps,
        outcome=Outcome(
            success=False, reward=0.0, termination=Termination.STEP_LIMIT, steps=len(steps)
        ),
        timings=Timings(started_at=NOW, finished_at=NOW),
    )


@pytest.fixture(scope="module")
def packet() -> FailurePacket:
    return build_packet([_trajectory(i) for i in range(6)], PacketConfig(token_budget=3000))


# -- prompt: derived from the sandbox's tables ----------------------------------------------


def _hook_line(text: str, hook: HookName) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(f"- {hook} (")]
    return line


@pytest.mark.parametrize("env", ENVS)
def test_prompt_states_every_allowed_effect_of_every_hook(env: str) -> None:
    text = system_prompt(env)
    for hook, kinds in ALLOWED_EFFECTS.items():
        line = _hook_line(text, hook)
        for kind in kinds:
            assert f"{kind}: " in line, (hook, kind)
            assert str(kind) in line.split(". ", 1)[0], (hook, kind)  # in the return shape too
    for value in (MAX_EFFECT_TEXT, MAX_SKILLS, MAX_STATE_BYTES):
        assert str(value) in text


def test_every_allowed_effect_and_hook_has_a_meaning() -> None:
    pairs = {(hook, kind) for hook, kinds in ALLOWED_EFFECTS.items() for kind in kinds}
    assert pairs == set(EFFECT_MEANINGS)
    assert set(HOOK_MEANINGS) == set(HookName)


def test_effect_list_follows_allowed_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change the table the runtime enforces and the prompt changes with it."""
    from harness_r1.contracts import EffectKind

    changed = dict(ALLOWED_EFFECTS)
    changed[HookName.POST_FEEDBACK] = frozenset({EffectKind.HINT, EffectKind.FORCE})
    monkeypatch.setattr(prompt_module, "ALLOWED_EFFECTS", changed)
    line = _hook_line(system_prompt("dbbench"), HookName.POST_FEEDBACK)
    assert "recover" not in line and "hint: " in line and "force: " in line


def test_plain_string_meaning_is_probed_from_the_effect_parsers() -> None:
    text = system_prompt("dbbench")
    assert "a plain str = hint" in _hook_line(text, HookName.POST_FEEDBACK)
    assert "a plain str = message" in _hook_line(text, HookName.PRE_DECISION)
    assert "a plain str = skills" in _hook_line(text, HookName.EPISODE_START)
    assert "plain str" not in _hook_line(text, HookName.PRE_ACTION)  # a str is junk there
    assert '{"effect": "allow"}' in _hook_line(text, HookName.PRE_ACTION)


def test_prompt_states_the_configured_static_limits() -> None:
    default = system_prompt("dbbench")
    for value in limits_stated(StaticLimits()).values():
        shown = f"10**{len(str(value)) - 1}" if value > 10**4 else str(value)
        assert shown in default, value
    custom = StaticLimits(
        max_source_chars=4321, max_nodes=765, max_string_literal=432, max_helpers=2
    )
    text = system_prompt("dbbench", config=PromptConfig(limits=custom))
    assert "at most 4321 chars, 765 syntax nodes, 2 helpers" in text
    assert "string literals of 432 chars" in text
    assert "8000 chars, 1200" not in text


def test_prompt_states_the_scope_and_banned_names() -> None:
    text = system_prompt("webshop")
    for name in ALLOWED_BUILTINS:
        assert name in text, name
    for name in RE_EXPORTS:
        if name.islower():
            assert name in text, name
    assert "except only: " + ", ".join(CATCHABLE_EXCEPTIONS) + ", re.error" in text
    for name in BANNED_NAMES:
        if not name.startswith("_"):
            assert name in text, name
    assert "similarity(a, b)" in text and "closest(text, options" in text
    assert "math (all but comb, factorial, lcm, perm, prod)" in text


def test_every_banned_construct_code_is_in_the_prompt() -> None:
    construct_codes = {c for c in Code if c.value.startswith("banned_")} - NOT_CONSTRUCTS
    assert construct_codes <= set(BANNED_CONSTRUCTS)
    text = system_prompt("alfworld")
    for word in BANNED_CONSTRUCTS.values():
        assert word in text


class RoomEnv:
    """`look` keeps the episode going, `leave` ends it (a test double of an env)."""

    name = "room"

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "A room.", {"admissible_actions": ["look", "leave"]}

    def step(self, action: str) -> StepResult:
        done = action == "leave"
        return StepResult("Still a room.", 0.0, done, False, {"admissible_actions": ["look"]})

    def close(self) -> None:
        pass


class RoomPrompter:
    def system_prompt(self, task: TaskSpec) -> str:
        return "Act."

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return observation

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        return raw_output.strip()


def test_prompt_names_every_ctx_key_the_runtime_passes_each_hook() -> None:
    seen: dict[HookName, set[str]] = {hook: set() for hook in HookName}

    def recorder(hook: HookName) -> Callable[[dict[str, Any], dict[str, Any]], None]:
        def record(ctx: dict[str, Any], state: dict[str, Any]) -> None:
            seen[hook].update(ctx)

        return record

    task = TaskSpec(
        env="room", split="t", task_id="r1", task_type="room", instruction="look", max_steps=3
    )
    suite = EnvSuite(
        name="room",
        splits=("t",),
        default_max_steps=3,
        make_env=lambda root: RoomEnv(),
        load_tasks=lambda root, split: [task],
        prompter=RoomPrompter(),
        data_files=lambda root: {},
    )
    hooks = InProcessHooks("ov", {hook: recorder(hook) for hook in HookName})
    runtime = HarnessRuntime(suite, ScriptedPolicy(["look"]), Path("."), RunConfig())
    runtime.run([EpisodeSpec(task=task, seed=1, hooks=hooks)])
    common = seen[HookName.EPISODE_START]
    text = system_prompt("room")
    for key in common:
        assert key in text, key
    for hook in HookName:
        assert seen[hook], f"{hook} was never called"
        extra = seen[hook] - common
        assert extra == set(HOOK_EXTRA_CTX.get(hook, ())), hook
        for key in extra:
            assert key in _section(text, f"- {hook} also: "), key


def _section(text: str, prefix: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(prefix)]
    return line


@pytest.mark.parametrize("env", ENVS)
def test_default_examples_pass_the_sandbox_in_the_output_format(env: str) -> None:
    examples = default_examples(env)
    assert 1 <= len(examples) <= 2
    for example in examples:
        assert len(example.patch.hooks) == 1
        result = parse_engineer_output(render_completion(example.patch, example.think), env=env)
        assert result.ok, result.message
        assert result.patch is not None and check_patch(result.patch).ok
        assert result.think == example.think and not result.notes
        assert result.patch.hooks == example.patch.hooks


def test_user_message_renders_the_packet_compactly(packet: FailurePacket) -> None:
    system, user = engineer_messages(packet)
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    assert "env dbbench" in text and "target tiny" in text
    assert "Task types: INSERT, UPDATE, counting." in text
    assert "invalid_actions" in text and "repeated_actions" in text
    episode = packet.episodes[0]
    assert f"### {episode.masked_task_id} ({episode.task_type})" in text
    assert "Constraints: " + "; ".join(episode.constraints) in text
    assert "same as step" in text  # a repeated snippet is not shown twice
    assert "task-0" not in text and "traj-000" not in text  # ids stay masked
    assert len(text) < len(packet.to_json_bytes())


def test_the_live_overlay_is_shown_with_how_to_add_replace_or_remove() -> None:
    note = "def hook(ctx, state):\n    return 'Use SQL.'\n"
    live = build_packet(
        [_trajectory(i) for i in range(6)],
        PacketConfig(token_budget=3000),
        incumbent={HookName.PRE_DECISION: [note]},
    )
    system, user = engineer_messages(live)
    text = user["content"]
    assert "## Live overlay" in text and "# === hook: NAME (replace) ===" in text
    assert "### pre_decision (1 link)\n# link 1 of 1\n" + note.strip() in text
    assert "(replace) ===" in system["content"]  # the answer format names the modes
    _, base_user = engineer_messages(build_packet([_trajectory(i) for i in range(6)]))
    assert "Live overlay" not in base_user["content"]


def test_prompt_is_deterministic(packet: FailurePacket) -> None:
    copy = FailurePacket.from_json_bytes(packet.to_json_bytes())
    first = engineer_messages(packet)
    assert engineer_messages(copy) == first
    assert json.dumps(engineer_messages(packet)) == json.dumps(first)
    assert engineer_prompt_text(packet) == engineer_prompt_text(copy)


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from harness_r1.models.local_models import SMOLLM2, converted_checkpoint

    return AutoTokenizer.from_pretrained(str(converted_checkpoint(SMOLLM2)))


@pytest.mark.integration
def test_system_prompt_stays_within_the_token_budget(
    smollm2_tokenizer: Any, packet: FailurePacket
) -> None:
    for env in ENVS:
        tokens = len(smollm2_tokenizer(system_prompt(env))["input_ids"])
        assert tokens <= PROMPT_TOKEN_BUDGET, (env, tokens)
    text = engineer_prompt_text(packet, tokenizer=smollm2_tokenizer)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


# -- OpenAI-compatible engineer ---------------------------------------------------------------


def fake_vllm_server(
    *, fail_first: int = 0, status: int = 503, max_n: int | None = None
) -> tuple[httpx.MockTransport, list[dict[str, Any]]]:
    """A stand-in for `vllm serve`: answers `n` choices with token ids (vLLM's
    `return_token_ids`) and logprobs; fails the first `fail_first` requests with `status`;
    `max_n` caps the choices like a provider that ignores `n`."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        body = json.loads(request.content)
        bodies.append(body)
        if len(bodies) <= fail_first:
            return httpx.Response(status, json={"error": "busy"})
        n = body["n"] if max_n is None else min(body["n"], max_n)
        choices = []
        for i in range(n):
            ids = [100 + body["seed"], 200 + i, 2]
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": f"<think>s{body['seed']}c{i}"},
                    "finish_reason": "stop",
                    "token_ids": ids if body.get("return_token_ids") else None,
                    "logprobs": {"content": [{"token": "x", "logprob": -0.5}] * len(ids)}
                    if body.get("logprobs")
                    else None,
                }
            )
        data: dict[str, Any] = {
            "choices": list(reversed(choices)),  # order by index, not position
            "usage": {"prompt_tokens": 7, "completion_tokens": 3 * n},
        }
        if body.get("return_token_ids"):
            data["prompt_token_ids"] = [1, 2, 3, 4, 5, 6, 7]
        return httpx.Response(200, json=data)

    return httpx.MockTransport(handler), bodies


MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def test_openai_engineer_sends_n_k_and_returns_k_samples_with_token_ids() -> None:
    transport, bodies = fake_vllm_server()
    engineer = OpenAIEngineer(
        "http://vllm.test/", "eng", transport=transport, token_ids=True, logprobs=True
    )
    samples = engineer.propose(MESSAGES, 4, temperature=0.8, seed=11, max_new_tokens=64)
    [body] = bodies
    assert body["n"] == 4 and body["seed"] == 11 and body["temperature"] == 0.8
    assert body["max_tokens"] == 64 and body["messages"] == MESSAGES
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert [s.text for s in samples] == [f"<think>s11c{i}" for i in range(4)]
    assert [s.completion_ids for s in samples] == [[111, 200 + i, 2] for i in range(4)]
    assert all(s.prompt_ids == [1, 2, 3, 4, 5, 6, 7] and s.prompt_tokens == 7 for s in samples)
    assert all(s.completion_tokens == 3 and s.tokens_exact for s in samples)
    assert samples[0].logprobs == [-0.5] * 3 and samples[0].finish_reason == "stop"


def test_openai_engineer_without_token_ids_leaves_them_none() -> None:
    transport, bodies = fake_vllm_server()
    engineer = OpenAIEngineer("http://vllm.test", "eng", transport=transport)
    samples = engineer.propose(MESSAGES, 2, temperature=1.0, seed=0, max_new_tokens=8)
    assert "return_token_ids" not in bodies[0] and "logprobs" not in bodies[0]
    assert all(s.completion_ids is None and s.prompt_ids is None for s in samples)
    assert all(s.completion_tokens == 3 and not s.tokens_exact for s in samples)  # usage share


def test_openai_engineer_retries_5xx_and_429() -> None:
    for status in (503, 500, 429):
        transport, bodies = fake_vllm_server(fail_first=2, status=status)
        engineer = OpenAIEngineer("http://vllm.test", "eng", transport=transport, attempts=3)
        samples = engineer.propose(MESSAGES, 2, temperature=1.0, seed=0, max_new_tokens=8)
        assert len(samples) == 2 and len(bodies) == 3


def test_openai_engineer_gives_up_after_its_attempts_and_never_retries_4xx() -> None:
    transport, bodies = fake_vllm_server(fail_first=10, status=502)
    engineer = OpenAIEngineer("http://vllm.test", "eng", transport=transport, attempts=2)
    with pytest.raises(EngineerError, match="502"):
        engineer.propose(MESSAGES, 2, temperature=1.0, seed=0, max_new_tokens=8)
    assert len(bodies) == 2
    transport, bodies = fake_vllm_server(fail_first=10, status=400)
    engineer = OpenAIEngineer("http://vllm.test", "eng", transport=transport, attempts=4)
    with pytest.raises(EngineerError, match="400"):
        engineer.propose(MESSAGES, 2, temperature=1.0, seed=0, max_new_tokens=8)
    assert len(bodies) == 1


def test_openai_engineer_asks_again_when_the_server_ignores_n() -> None:
    transport, bodies = fake_vllm_server(max_n=1)
    engineer = OpenAIEngineer("http://vllm.test", "eng", transport=transport)
    samples = engineer.propose(MESSAGES, 3, temperature=1.0, seed=5, max_new_tokens=8)
    assert [b["n"] for b in bodies] == [3, 2, 1] and [b["seed"] for b in bodies] == [5, 6, 7]
    assert [s.text for s in samples] == ["<think>s5c0", "<think>s6c0", "<think>s7c0"]
    assert all(s.completion_tokens == 3 and s.tokens_exact for s in samples)


# -- proposals ------------------------------------------------------------------------------


class ScriptedEngineer:
    """A test double for an engineer model: returns fixed texts, with made-up token ids."""

    model_id = "scripted-engineer"

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.calls: list[dict[str, Any]] = []

    def propose(
        self,
        messages: Sequence[dict[str, str]],
        k: int,
        *,
        temperature: float = 1.0,
        seed: int = 0,
        max_new_tokens: int = 768,
    ) -> list[EngineerSample]:
        self.calls.append({"messages": list(messages), "k": k, "seed": seed, "t": temperature})
        return [
            EngineerSample(
                text=self.texts[i % len(self.texts)],
                completion_ids=[i, i + 1],
                prompt_ids=[9],
                completion_tokens=2,
                prompt_tokens=1,
            )
            for i in range(k)
        ]


VALID = (
    '<think>snap</think><patch>{"description": "d", "hooks": [{"hook": "post_feedback", '
    '"code": "def hook(ctx, state):\\n    return \'try again\'\\n"}]}</patch>'
)
BANNED = (
    '<think>x</think><patch>{"description": "d", "hooks": [{"hook": "pre_action", '
    '"code": "def hook(ctx, state):\\n    import os\\n    return None\\n"}]}</patch>'
)
UNPARSEABLE = "I would add a hook that helps the agent."
BAD_JSON = '<think>x</think><patch>{"hooks": [}</patch>'
OTHER_ENV = (
    '<patch>{"env": "webshop", "hooks": [{"hook": "pre_action", '
    '"code": "def hook(ctx, state):\\n    return None\\n"}]}</patch>'
)


def test_propose_patches_classifies_valid_unparseable_and_rejected(
    packet: FailurePacket,
) -> None:
    engineer = ScriptedEngineer([VALID, UNPARSEABLE, BANNED, BAD_JSON, OTHER_ENV])
    proposals = propose_patches(packet, engineer, 5, seed=3, temperature=0.7)
    [call] = engineer.calls
    assert call["k"] == 5 and call["seed"] == 3 and call["t"] == 0.7
    assert call["messages"] == engineer_messages(packet)
    summary = [(p.valid, p.stage, p.reason) for p in proposals]
    assert summary == [
        (True, None, None),
        (False, "parse", "no_patch_block"),
        (False, "static", "banned_import"),
        (False, "parse", "invalid_json"),
        (False, "parse", "env_mismatch"),
    ]
    valid, _, banned, _, _ = proposals
    assert valid.patch is not None and valid.patch.env == "dbbench"
    assert banned.patch is not None and "banned_import" in banned.codes
    assert banned.message.startswith("pre_action line 2: imports are not allowed")
    assert [p.completion_ids for p in proposals] == [[i, i + 1] for i in range(5)]
    assert [p.index for p in proposals] == list(range(5))
    as_json = json.loads(proposals_json([p.to_dict() for p in proposals]))
    assert as_json[0]["patch_sha256"] == valid.patch.sha256()
    assert as_json[1]["patch"] is None and as_json[2]["reason"] == "banned_import"


def test_static_limits_of_the_config_apply_to_proposals(packet: FailurePacket) -> None:
    tight = PromptConfig(limits=StaticLimits(max_source_chars=20))
    [proposal] = propose_patches(packet, ScriptedEngineer([VALID]), 1, config=tight)
    assert (proposal.valid, proposal.reason) == (False, "source_too_long")
    assert classify(EngineerSample(text=VALID), "dbbench").valid


def test_propose_command_reads_a_packet_file_or_trajectories(
    tmp_path: Path, packet: FailurePacket
) -> None:
    packet_file = tmp_path / "packet.json"
    packet_file.write_bytes(packet.to_json_bytes())
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(_trajectory(i).model_dump_json() + "\n" for i in range(6)))
    engineer = ScriptedEngineer([VALID, BANNED])
    from_packet = propose_command(packet_file, 2, engineer, seed=1, temperature=0.5)
    assert [d["valid"] for d in from_packet] == [True, False]
    assert {d["packet_id"] for d in from_packet} == {packet.packet_id}
    assert from_packet[0]["engineer"] == "scripted-engineer"
    assert from_packet[0]["completion_ids"] == [0, 1]
    from_runs = propose_command(runs, 2, engineer)
    assert from_runs[0]["packet_id"] == load_packet(runs).packet_id
    json.loads(proposals_json(from_runs))
    with pytest.raises(ValueError, match="neither a FailurePacket"):
        bad = tmp_path / "bad.json"
        bad.write_text('{"x": 1}')
        load_packet(bad)


# -- backends that cannot run here: clear errors --------------------------------------------


def test_vllm_engineer_without_vllm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(EngineerError, match=r"\[vllm\] extra"):
        VLLMEngineer("/models/engineer")
    with pytest.raises(EngineerError, match=r"\[vllm\] extra"):
        build_engineer(EngineerSpec(kind="vllm", model="/models/engineer"))


def test_adapter_without_peft_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(EngineerError, match="needs the peft package"):
        load_adapter(object(), tmp_path)


def test_build_engineer_rejects_bad_specs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="base URL"):
        build_engineer(EngineerSpec(kind="openai"))
    with pytest.raises(ValueError, match="adapter"):
        build_engineer(
            EngineerSpec(kind="openai", base_url="http://x", model="m", adapter=tmp_path)
        )
    with pytest.raises(ValueError, match="unknown engineer"):
        build_engineer(EngineerSpec(kind=str(tmp_path / "nothing")))
    engineer = build_engineer(EngineerSpec(kind="openai", base_url="http://x", model="m"))
    assert isinstance(engineer, OpenAIEngineer) and engineer.model_id == "m"


# -- the real embedded model ------------------------------------------------------------------


@pytest.mark.integration
def test_transformers_engineer_on_smollm2_samples_k_with_token_ids_and_reproduces() -> None:
    engineer = TransformersEngineer.embedded()
    messages = [
        {"role": "system", "content": "You write harness patches."},
        {"role": "user", "content": "Write a patch that breaks loops."},
    ]
    first = engineer.propose(messages, 2, temperature=1.0, seed=7, max_new_tokens=16)
    assert len(first) == 2
    prompt_text = engineer.tokenizer.decode(first[0].prompt_ids)
    assert prompt_text == engineer.prompt_text(messages)
    for sample in first:
        assert sample.completion_ids and 1 <= len(sample.completion_ids) <= 16
        assert sample.completion_tokens == len(sample.completion_ids)
        decoded = engineer.tokenizer.decode(sample.completion_ids, skip_special_tokens=True)
        assert decoded == sample.text and sample.text
        assert sample.finish_reason in ("stop", "length")
    again = engineer.propose(messages, 2, temperature=1.0, seed=7, max_new_tokens=16)
    assert [s.completion_ids for s in again] == [s.completion_ids for s in first]
    assert first[0].completion_ids != first[1].completion_ids  # k distinct samples


# -- the lean prompt (issue 20: a small engineer's passes were dominated by a ~2.6k prompt) ---

LEAN = PromptConfig(lean=True)
# system + packet (the full prompt: ~2.6k on the same packet); ~950 without the
# template menu (~250 tokens on DBBench, the longest library)
LEAN_TOKEN_BUDGET = 1250


@pytest.mark.parametrize("env", ENVS)
def test_the_lean_prompt_keeps_the_surface_a_patch_needs(env: str) -> None:
    from harness_r1.trainer.prompt import _effect_shapes, ctx_keys

    text = system_prompt(env, config=LEAN)
    for hook in HookName:
        assert f"- {hook}: return {_effect_shapes(hook)}" in text, hook
    assert all(key in text for key in ctx_keys())
    for hook, keys in HOOK_EXTRA_CTX.items():
        assert f"{hook} also {', '.join(keys)}" in text
    assert "<think>" in text and "<patch>" in text and text.count("Example:") == 1
    menu = "\n".join(template_menu(env))
    assert text.endswith("\n" + menu)  # the library templates, the full prompt has no menu
    assert len(text) - len(menu) < len(system_prompt(env)) / 2


@pytest.mark.parametrize("env", ENVS)
def test_every_call_of_the_lean_menu_renders_a_patch_of_the_env(env: str) -> None:
    """The menu's calls are the names and labels `template_call` reads: an engineer that copies
    one writes a valid call (an engineer never shown the menu invented names, all refused)."""
    from harness_r1.trainer.template_calls import template_call
    from harness_r1.trainer.templates import templates_for

    (line,) = template_menu(env)
    calls = line.split(" one of ", 1)[1].removesuffix(".").split("; ")
    menu = [t.name for t in templates_for(env) if t.in_menu]
    assert [c.split("(")[0] for c in calls] == menu
    for call in calls:
        name = call.split("(")[0]
        text = f"<think>t</think><patch>\n# description: templates: {name}. {call}.\n</patch>"
        result = template_call(text, env)
        assert result is not None and result.patch is not None, (call, result)
        assert result.patch.env == env


def test_the_menu_leaves_out_templates_newer_than_the_committed_engineer() -> None:
    from harness_r1.trainer.templates import TEMPLATES

    assert not TEMPLATES["ws_options_check"].in_menu
    assert "ws_options_check(" not in template_menu("webshop")[0]
    assert "ws_price_guard(" in template_menu("webshop")[0]


def test_the_menu_leaves_out_templates_of_a_removed_hook() -> None:
    from harness_r1.trainer.templates import TEMPLATES

    kept = tuple(h for h in HookName if h != HookName.PRE_ACTION)
    (line,) = template_menu("webshop", kept)
    assert "ws_pick_options(" in template_menu("webshop")[0]
    assert TEMPLATES["ws_pick_options"].hook == HookName.PRE_ACTION
    assert "ws_pick_options(" not in line and "ws_skills(" in line


def test_the_lean_packet_shows_the_failure_points_last_steps(packet: FailurePacket) -> None:
    full = engineer_messages(packet)[1]["content"]
    lean = engineer_messages(packet, config=LEAN)[1]["content"]
    assert len(packet.episodes) > LEAN.lean_episodes
    assert lean.count("\n### ") == LEAN.lean_episodes < full.count("\n### ")
    assert f"; {LEAN.lean_episodes} shown." in lean  # the header counts what it shows
    first = packet.episodes[0]
    kept = first.snippets[-LEAN.lean_snippets :]
    assert f"step {kept[0].step}" in lean
    if len(first.snippets) > LEAN.lean_snippets:
        dropped = first.snippets[0]
        assert f"step {dropped.step} " not in lean.split("\n### ")[1]
    assert engineer_messages(packet, config=LEAN) == engineer_messages(packet, config=LEAN)


def test_the_lean_packet_names_what_each_live_hook_does_instead_of_its_code() -> None:
    documented = (
        'def hook(ctx, state):\n    """Veto a repeated SQL statement."""\n'
        + "    x = 1\n" * 60
        + "    return None\n"
    )
    bare = "def hook(ctx, state):\n    return 'Use SQL.'\n"
    live = build_packet(
        [_trajectory(i) for i in range(6)],
        PacketConfig(token_budget=3000),
        incumbent={HookName.PRE_ACTION: [documented], HookName.PRE_DECISION: [bare]},
    )
    lean = engineer_messages(live, config=LEAN)[1]["content"]
    full = engineer_messages(live)[1]["content"]
    assert "x = 1" in full and "x = 1" not in lean  # the code stays out of the lean prompt
    assert "- pre_action (1 link): Veto a repeated SQL statement." in lean
    assert "- pre_decision (1 link): return 'Use SQL.'" in lean  # no docstring: its last line
    assert "(replace) ===" in lean and "(remove)" in lean
    assert lean.count("\n### ") == LEAN.lean_episodes  # hooks are not episode headers


# -- the hook ablation (issue 20): an engineer that may not write one hook --------------------


@pytest.mark.parametrize("removed", list(HookName))
@pytest.mark.parametrize("lean", [False, True])
def test_a_removed_hook_is_neither_taught_nor_shown_in_an_example(
    removed: HookName, lean: bool
) -> None:
    kept = hooks_without([str(removed)])  # as `--without-hook` and the benchmark derive it
    assert kept == tuple(h for h in HookName if h != removed)
    for env in ENVS:
        text = system_prompt(env, config=PromptConfig(lean=lean, hooks=kept))
        assert str(removed) not in text, (env, removed)
        assert all(str(hook) in text for hook in kept), (env, removed)
        examples = default_examples(env, PromptConfig(hooks=kept))
        assert examples and all(removed not in {h.hook for h in e.patch.hooks} for e in examples)
        if reference_example(env, hooks=kept) is not None:  # the env's own example stays last
            assert examples[-1].patch.env == env, (env, removed)


def test_all_hooks_allowed_is_the_prompt_as_before() -> None:
    for env in ENVS:
        assert default_examples(env, PromptConfig(hooks=tuple(HookName))) == default_examples(env)
        assert default_examples(env)[0] is SNAP_EXAMPLE


def test_a_patch_writing_a_removed_hook_is_refused_at_scope(packet: FailurePacket) -> None:
    start_and_decision = PromptConfig(hooks=(HookName.EPISODE_START, HookName.PRE_DECISION))
    engineer = ScriptedEngineer([VALID, BANNED])  # post_feedback; pre_action with an import
    proposals = propose_patches(packet, engineer, 2, config=start_and_decision)
    assert [(p.valid, p.stage, p.reason) for p in proposals] == [
        (False, "scope", "hook_not_allowed"),
        (False, "scope", "hook_not_allowed"),
    ]
    assert proposals[0].message == (
        "writes post_feedback; this engineer may write only episode_start, pre_decision"
    )
    assert classify(EngineerSample(text=VALID), "dbbench", hooks=[HookName.POST_FEEDBACK]).valid


@pytest.mark.integration
def test_the_lean_prompt_is_a_third_of_the_full_one(
    smollm2_tokenizer: Any, packet: FailurePacket
) -> None:
    def tokens(config: PromptConfig) -> int:
        messages = engineer_messages(packet, config=config)
        return sum(len(smollm2_tokenizer(m["content"])["input_ids"]) for m in messages)

    lean, full = tokens(LEAN), tokens(PromptConfig())
    assert lean <= LEAN_TOKEN_BUDGET, lean
    assert lean * 2 < full, (lean, full)


@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.parametrize("env", ["alfworld", "dbbench", "webshop"])
def test_the_advisory_prompt_asks_for_advice_not_forced_steps(env: str, lean: bool) -> None:
    from harness_r1.trainer.prompt import ADVISORY_TASK, system_prompt
    from harness_r1.trainer.prompt_config import PromptConfig
    from harness_r1.trainer.templates import TEMPLATES

    default = system_prompt(env, config=PromptConfig(lean=lean))
    advisory = system_prompt(env, config=PromptConfig(lean=lean, advisory=True))
    assert ADVISORY_TASK in advisory and ADVISORY_TASK not in default
    assert "forced steps)" not in advisory
    solvers = [name for name, t in TEMPLATES.items() if t.role == "solver" and t.applies_to(env)]
    assert solvers and any(f"{name}(" in default for name in solvers) == lean
    assert not any(f"{name}(" in advisory for name in solvers)
    # the examples: the generic loop breaker instead of a hook of the env's reference patch
    # (a solver's)
    assert "Break loops of repeated or useless actions." in advisory.split("Example")[-1]
    if env != "alfworld":  # its reference hooks are over the example size: the loop breaker too
        assert "Break loops of repeated or useless actions." not in default.split("Example")[-1]
