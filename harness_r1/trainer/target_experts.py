"""Expert demonstrations for the deployed target, played through the harness runtime itself.

Why through the runtime: the deployed target must learn on the prompts it meets when it runs
(the same system prompt, first turn, feedback turns and history window), so the demonstrations
are episodes of `HarnessRuntime` with no overlay, where the "model" is the env's expert
(`EnvSuite.expert`: the planner's plan, gold SQL, a goal's oracle path). Every model call is
recorded (`GenerationRecord`: the messages the runtime built and the expert's reply), and the
successful episodes become training rows. Nothing here is a harness hook: no forced or
rewritten action is ever learned.

Held-out splits are refused: an expert plays only its `training_splits`, and each row carries
its task id so a test can check that no row comes from `valid_seen`, DBBench `dev` or WebShop
goals 40-59.

Rows (`episode_rows`): one per stretch of an episode whose prompts extend each other. While
the runtime's history window (`history_turns`) has not slid, step k's prompt is step k-1's
prompt plus its reply and feedback, so one conversation with a loss on every assistant turn
trains those steps exactly as separate rows would, at the cost of one sequence instead of k.
Once the window slides the prompt drops its oldest exchange, and each later step is its own
row (prompt = what the runtime sent, completion = the reply). Trained by `train_target_sft`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec, Trajectory
from harness_r1.envs import EnvSuite, Expert, ExpertEpisode, StepResult
from harness_r1.harness import EpisodeSpec, GenerationRecord, HarnessRuntime, NoHooks, RunConfig
from harness_r1.models import Generation, GenerationRequest

#: what the expert "says" when it has nothing to say: the episode fails and is dropped
NO_DEMONSTRATION = "(no demonstration)"
EXPERT_MODEL_ID = "expert"


class HeldOutTask(ValueError):
    """An expert was asked to play a task outside its env's training splits."""


class _DemonstratedEnv:
    """The expert's env, remembering what it last showed (the expert replies to it)."""

    def __init__(self, expert: Expert, data_root: Path) -> None:
        self.expert = expert
        self.inner = expert.make_env(data_root)
        self.name = self.inner.name
        self.episode: ExpertEpisode | None = None
        self.shown: tuple[str, dict[str, Any]] = ("", {})

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        observation, info = self.inner.reset(task, seed=seed)
        self.episode = self.expert.episode(task, self.inner)
        self.shown = (observation, info)
        return observation, info

    def step(self, action: str) -> StepResult:
        result = self.inner.step(action)
        self.shown = (result.observation, result.info)
        return result

    def close(self) -> None:
        self.inner.close()


class _ExpertPolicy:
    """The expert in the model's seat: one episode at a time (the runtime's lockstep is 1)."""

    model_id = EXPERT_MODEL_ID
    version = "1"
    max_batch = 1

    def __init__(self, env: _DemonstratedEnv) -> None:
        self.env = env

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        assert len(requests) == 1 and self.env.episode is not None
        reply = self.env.episode.reply(*self.env.shown)
        text = NO_DEMONSTRATION if reply is None else reply
        return [Generation(text=text, tokens=len(text.split()))]


@dataclass(frozen=True)
class Demonstrations:
    trajectories: list[Trajectory]
    records: list[GenerationRecord]

    @property
    def successes(self) -> int:
        return sum(t.outcome.success for t in self.trajectories)


def demonstrate(
    suite: EnvSuite, data_root: Path, tasks: Sequence[TaskSpec], *, history_turns: int
) -> Demonstrations:
    """The expert's episodes on `tasks` (seed 0, no overlay), with every model call recorded.
    Raises HeldOutTask for a task outside the expert's training splits, before playing any."""
    expert = suite.expert
    if expert is None:
        raise ValueError(f"env {suite.name!r} has no expert")
    outside = sorted({t.split for t in tasks} - set(expert.training_splits))
    if outside:
        allowed = ", ".join(expert.training_splits)
        raise HeldOutTask(
            f"{suite.name}: the expert plays only {allowed}; refused split(s) {', '.join(outside)}"
        )
    env = _DemonstratedEnv(expert, data_root)
    records: list[GenerationRecord] = []
    runtime = HarnessRuntime(
        suite,
        _ExpertPolicy(env),
        data_root,
        RunConfig(agent_id="expert", history_turns=history_turns, lockstep=1),
        env_factory=lambda: env,
        on_generation=records.append,
    )
    try:
        specs = [EpisodeSpec(task=task, seed=0, hooks=NoHooks()) for task in tasks]
        trajectories = runtime.run(specs)
    finally:
        runtime.close()
    return Demonstrations(trajectories, records)


def episode_rows(demos: Demonstrations) -> list[dict[str, Any]]:
    """Training rows of the successful demonstrations (see the module docstring): `messages`
    (a conversation ending with an assistant turn), `train_from` (the index of the first
    assistant turn with a loss: every assistant turn from there on is trained) and
    `metadata` (env, split, task id, steps)."""
    by_trajectory: dict[str, list[GenerationRecord]] = {}
    for record in demos.records:
        by_trajectory.setdefault(record.trajectory_id, []).append(record)
    rows = []
    for trajectory in demos.trajectories:
        if not trajectory.outcome.success:
            continue
        calls = sorted(by_trajectory.get(trajectory.trajectory_id, []), key=lambda r: r.step)
        rows.extend(_rows_of(trajectory, calls))
    return rows


def _rows_of(trajectory: Trajectory, calls: Sequence[GenerationRecord]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    chain: list[dict[str, str]] = []
    chain_steps: list[int] = []
    for call in calls:
        extends = chain and _is_prefix(chain, call.messages)
        if chain and not extends:
            rows.append(_row(trajectory, chain, chain_steps))
            chain, chain_steps = [], []
        chain = [dict(m) for m in call.messages] + [{"role": "assistant", "content": call.output}]
        chain_steps.append(call.step)
    if chain:
        rows.append(_row(trajectory, chain, chain_steps))
    return rows


def _is_prefix(chain: Sequence[dict[str, str]], messages: Sequence[dict[str, str]]) -> bool:
    return len(messages) > len(chain) and list(messages[: len(chain)]) == list(chain)


def _row(
    trajectory: Trajectory, messages: list[dict[str, str]], steps: list[int]
) -> dict[str, Any]:
    first_trained = len(messages) - 2 * len(steps) + 1  # one trained assistant turn per step
    return {
        "messages": messages,
        "train_from": first_trained,
        "metadata": {
            "env": trajectory.env,
            "split": trajectory.task.split,
            "task_id": trajectory.task.task_id,
            "steps": steps,
        },
    }


def write_rows(rows: Iterable[dict[str, Any]], path: Path) -> str:
    """Rows as JSONL (written whole, then renamed); returns the file's SHA-256."""
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.rename(path)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
