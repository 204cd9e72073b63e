"""ALFWorld as an Env: real TextWorld games (alfworld 0.4.x `game.tw-pddl`) played offline.

How a game is played: the way ALFWorld itself and AgentBench play it, through
``textworld.gym.register_games([game], EnvInfos(won, admissible_commands, extras=["gamefile"]),
batch_size=1, asynchronous=False, wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])`` and
``textworld.gym.make``. The gym env is batched (tuples and lists of one); we unwrap it.
`policy_commands` (the planner's expert plan) is requested only with `expert_plan=True`: it
costs a fast-downward re-plan on every reset and step, and it is the task's solution.

Cost model (measured here on valid_seen games, 2 shared CPU cores, medians):
- The first reset of an instance copies and loads fast-downward's 33 MB shared library
  (TextWorld loads a private copy per engine) and builds the game: ~1.3 s.
- Resetting the same game again skips loading the game file and only rebuilds the PDDL state:
  ~0.4 s (0.16-1.1 s by scene size); switching to another game reloads the game file in the
  same engine: ~0.9 s (0.4-2.2 s).
- A step is ~0.04 s (at most ~0.1 s). With `expert_plan=True` TextWorld also re-plans with
  fast-downward after every reset and step: resets ~0.7 / ~1.6 s, steps up to ~1 s.
So one instance should be kept per worker and reused across tasks: each new instance maps
another private copy of the library, which is never unloaded. (Those figures predate the
translation memo, translation_cache.py: TextWorld translates a game's PDDL to SAS on every load
and reset, and now translates each game once per process.)

Why one registration per instance: the `AlfredDemangler` *instance* handed to `register_games`
is shared by every env made from that registration (TextWorld's `Wrapper.__call__` returns
itself), so two envs made from one registration would silently play each other's game. Each
AlfWorldEnv registers once under a unique name, makes its env once, and drops the registry
entry, and later games are loaded into that same engine.

Semantics:
- reset: the game's opening text without TextWorld's banner, i.e. the room description and
  "Your task is to: ..." on the next line (as AgentBench shows it). `seed` is accepted and has
  no effect: ALFWorld games are deterministic (no shuffling of names, fixed initial state).
- step: reward 1.0 once `won`, else 0.0; terminated when won. The engine's own step cap is set
  very high (step limits are the harness runtime's business); if it is ever hit, the episode
  is `truncated`.
- invalid_action: True when the action (stripped) was not among the admissible commands of the
  state it was played in, or the game answered "Nothing happens.". In this engine the two
  coincide: a command is applied only if it is exactly one of the admissible commands
  (case-sensitive), and anything else yields "Nothing happens.".
- info: `admissible_actions` (the commands valid now, sorted), `success` (= won),
  `invalid_action`. The expert plan is never put in `info` (it would hand the solution to
  hooks); ask for it with `expert_plan=True` and read `AlfWorldEnv.expert_plan`.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.alfworld import translation_cache
from harness_r1.envs.alfworld.tasks import ENV_NAME, game_path, read_game
from harness_r1.envs.base import (
    INFO_ADMISSIBLE,
    INFO_INVALID,
    INFO_SUCCESS,
    EnvError,
    StepResult,
)
from harness_r1.envs.data import DataError

NOTHING_HAPPENS = "Nothing happens."
#: TextWorld's own episode cap; far above any harness step limit.
ENGINE_STEP_CAP = 100_000
_BANNER_PREFIX = "-= Welcome to TextWorld"


class GameFileError(DataError, EnvError):
    """A game file is missing or the engine cannot load it: bad data that also ends the episode."""


def initial_observation(raw: str) -> str:
    """The opening text without TextWorld's banner: room description, then the goal sentence."""
    paragraphs = [p.strip() for p in raw.strip().split("\n\n") if p.strip()]
    if paragraphs and paragraphs[0].startswith(_BANNER_PREFIX):
        paragraphs = paragraphs[1:]
    return "\n".join(paragraphs)


def _first(value: Any) -> Any:
    """Unwrap one element of TextWorld's batch (batch_size=1)."""
    if isinstance(value, list | tuple):
        return value[0] if value else None
    return value


def _admissible(infos: dict[str, Any]) -> list[str]:
    commands = _first(infos.get("admissible_commands")) or []
    return [str(c) for c in commands]


class AlfWorldEnv:
    """One ALFWorld episode at a time over one TextWorld engine (see the module docstring)."""

    name: str = ENV_NAME

    def __init__(self, data_root: Path, *, expert_plan: bool = False) -> None:
        self.data_root = Path(data_root)
        self.expert_plan_enabled = expert_plan
        #: The planner's remaining plan after the last reset/step (only with expert_plan=True).
        self.expert_plan: list[str] | None = None
        self._gym: Any = None
        self._loaded: Path | None = None  # game file currently loaded in the engine
        self._admissible: list[str] = []
        self._done = True
        self._started = False

    # -- engine -----------------------------------------------------------------------------

    def _make_gym(self, first_game: Path) -> Any:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        translation_cache.install()

        request = textworld.EnvInfos(
            won=True,
            admissible_commands=True,
            extras=["gamefile"],
            policy_commands=self.expert_plan_enabled,
        )
        env_id = textworld.gym.register_games(
            [str(first_game)],
            request,
            batch_size=1,
            asynchronous=False,
            max_episode_steps=ENGINE_STEP_CAP,
            wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
            name=f"harness-r1-alfworld-{uuid.uuid4().hex}",
        )
        try:
            return textworld.gym.make(env_id)
        finally:
            textworld.gym.registry.pop(env_id, None)

    def _reset_engine(self, path: Path) -> tuple[Any, dict[str, Any]]:
        if self._gym is None:
            self._gym = self._make_gym(path)
            self._loaded = None
        batch = self._gym.batch_env
        if self._loaded != path:
            self._loaded = None
            batch.load([str(path)])
            self._loaded = path
        observations, infos = batch.reset()
        return observations, infos

    # -- Env protocol -----------------------------------------------------------------------

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        del seed  # deterministic games: nothing to seed (see the module docstring)
        if task.env != self.name:
            raise EnvError(f"task {task.task_id!r} is for env {task.env!r}, not {self.name!r}")
        self._done = True
        try:
            path = game_path(self.data_root, task)
            read_game(path)  # cheap (memoised) check that the file exists and is well-formed
        except DataError as err:
            raise GameFileError(err.path, err.problem) from err
        try:
            observations, infos = self._reset_engine(path)
        except Exception as err:  # TextWorld/fast-downward raise anything on a bad game
            self._loaded = None
            raise GameFileError(path, f"TextWorld cannot load this game: {err!r}") from err
        self._admissible = _admissible(infos)
        self.expert_plan = self._plan(infos)
        self._done = False
        self._started = True
        info = {INFO_ADMISSIBLE: list(self._admissible), INFO_SUCCESS: False, INFO_INVALID: False}
        return initial_observation(str(_first(observations))), info

    def step(self, action: str) -> StepResult:
        if not self._started or self._gym is None:
            raise EnvError("step() before reset()")
        if self._done:
            raise EnvError("the episode is over; reset() before stepping again")
        command = str(action).strip()
        played_in = self._admissible
        try:
            observations, _scores, dones, infos = self._gym.step([command])
        except Exception as err:
            self._done = True
            raise EnvError(f"TextWorld failed on {command!r}: {err!r}") from err
        observation = str(_first(observations)).strip()
        won = bool(_first(infos.get("won")))
        engine_done = bool(_first(dones))
        self._admissible = _admissible(infos)
        self.expert_plan = self._plan(infos)
        terminated = won
        truncated = engine_done and not won
        self._done = terminated or truncated
        info = {
            INFO_ADMISSIBLE: list(self._admissible),
            INFO_SUCCESS: won,
            INFO_INVALID: observation == NOTHING_HAPPENS or command not in played_in,
        }
        return StepResult(observation, 1.0 if won else 0.0, terminated, truncated, info)

    def close(self) -> None:
        gym, self._gym = self._gym, None
        self._loaded = None
        self._done = True
        self._started = False
        if gym is not None:
            gym.close()

    def _plan(self, infos: dict[str, Any]) -> list[str] | None:
        if not self.expert_plan_enabled:
            return None
        plan = _first(infos.get("policy_commands"))
        return [str(c) for c in plan] if plan is not None else None
