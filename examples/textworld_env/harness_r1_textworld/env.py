"""One challenge game at a time, played through `textworld.start` (TextWorld's own engine).

Semantics (what `harness-r1 env check` holds it to):
- reset: the game's opening text without TextWorld's banner (the objective is in it, where
  the game states one). `seed` has no effect: a generated game is deterministic, and the seed
  that matters, the generation seed, is part of the task.
- step: reward 1.0 once won, else 0.0; terminated when won or lost (the cooking and simple
  games can be lost, e.g. by eating what should be cooked). The engine's own step cap is never
  reached: step limits are the harness runtime's business.
- info: `admissible_actions` (TextWorld's admissible commands now, sorted), `success` (won),
  `invalid_action` (the command was not admissible where it was played), plus `score` and
  `max_score` (the game's points: progress in games with intermediate rewards).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs import INFO_ADMISSIBLE, INFO_INVALID, INFO_SUCCESS, EnvError, StepResult
from harness_r1_textworld.catalog import ENV_NAME
from harness_r1_textworld.games import game_file

_BANNER_END = "$$$$$$$ \n"


def game_text(feedback: str) -> str:
    """The engine's text without its ASCII-art banner (reset), the trailing `>` prompt and
    blank lines."""
    text = feedback.split(_BANNER_END)[-1] if _BANNER_END in feedback else feedback
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    while lines and lines[-1].strip() == ">":
        lines.pop()
    return "\n".join(lines)


@contextmanager
def _quiet_engine() -> Iterator[None]:
    """Jericho warns that a generated game's score tracking is unsupported (TextWorld tracks
    the score itself: `score`, `won`) and that an overlong command was cut (it is an invalid
    action all the same, and says so in `info`): neither says anything to an operator."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Game .* is not fully supported")
        warnings.filterwarnings("ignore", message=r".* was truncated to ")
        yield


class TextWorldChallengeEnv:
    """One episode at a time; the engine is started on the first reset of each game."""

    name: str = ENV_NAME

    def __init__(self, data_root: Path) -> None:
        del data_root  # games live in the cache (games.py)
        self._engine: Any = None
        self._game: Path | None = None
        self._admissible: list[str] = []
        self._done = True
        self._started = False

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        del seed  # module docstring: the generation seed is the task's
        if task.env != self.name:
            raise EnvError(f"task {task.task_id!r} is for env {task.env!r}, not {self.name!r}")
        payload = task.payload
        try:
            path = game_file(str(payload["challenge"]), str(payload["level"]), int(payload["seed"]))
            with _quiet_engine():
                state = self._start(path).reset()
        except (KeyError, ValueError, TypeError) as err:
            raise EnvError(f"task {task.task_id!r} does not name a game: {err!r}") from err
        except EnvError:
            raise
        except Exception as err:  # TextWorld raises anything on a broken game
            raise EnvError(f"TextWorld cannot start {task.task_id!r}: {err!r}") from err
        self._done = False
        self._started = True
        return game_text(str(state.feedback)), self._info(state, invalid=False)

    def step(self, action: str) -> StepResult:
        if not self._started:
            raise EnvError("step() before reset()")
        if self._done:
            raise EnvError("the episode is over; reset() before stepping again")
        command = str(action).strip()
        played_in = self._admissible
        try:
            with _quiet_engine():
                state, _score, _done = self._engine.step(command)
        except Exception as err:
            self._done = True
            raise EnvError(f"TextWorld failed on {command!r}: {err!r}") from err
        won, lost = bool(state.won), bool(state.lost)
        self._done = won or lost
        info = self._info(state, invalid=command not in played_in)
        return StepResult(
            game_text(str(state.feedback)), 1.0 if won else 0.0, self._done, False, info
        )

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._game = None

    def _start(self, path: Path) -> Any:
        """The engine for this game: started once per game file, reset for each episode."""
        if self._engine is not None and self._game == path:
            return self._engine
        import textworld

        self.close()
        infos = textworld.EnvInfos(
            admissible_commands=True, won=True, lost=True, score=True, max_score=True
        )
        self._engine = textworld.start(str(path), request_infos=infos)
        self._game = path
        return self._engine

    def _info(self, state: Any, *, invalid: bool) -> dict[str, Any]:
        self._admissible = sorted(str(c) for c in (state.admissible_commands or []))
        return {
            INFO_ADMISSIBLE: list(self._admissible),
            INFO_SUCCESS: bool(state.won),
            INFO_INVALID: invalid,
            "score": int(state.score or 0),
            "max_score": int(state.max_score or 0),
        }
