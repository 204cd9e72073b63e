"""The benchmark tasks the daemon replays, by (env, split, task_id): one index per daemon,
shared by the canary (which replays a batch's tasks) and the ingest's replay check (which
keeps out of batches a failure whose task it could not replay), so each split is read once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness_r1.contracts import TaskSpec
from harness_r1.envs import get_suite


class TaskIndex:
    """TaskSpecs by (env, split, task_id), loaded once per split from the data root.

    The root may be given as a function, resolved on first use: a daemon that only ingests
    (or has not sealed a batch yet) must start without benchmark data."""

    def __init__(self, data_root: Path | Callable[[], Path]) -> None:
        self._root = data_root
        self._splits: dict[tuple[str, str], list[TaskSpec]] = {}

    @property
    def data_root(self) -> Path:
        if callable(self._root):
            self._root = self._root()
        return self._root

    def split(self, env: str, split: str) -> list[TaskSpec]:
        key = (env, split)
        if key not in self._splits:
            self._splits[key] = get_suite(env).load_tasks(self.data_root, split)
        return self._splits[key]

    def get(self, env: str, split: str, task_id: str) -> TaskSpec:
        for task in self.split(env, split):
            if task.task_id == task_id:
                return task
        raise LookupError(f"task {task_id!r} is not in {env}/{split} of {self.data_root}")
