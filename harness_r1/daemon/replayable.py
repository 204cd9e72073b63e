"""Which failed trajectories the canary can replay: those whose (env, split, task_id) is in the
daemon's benchmark data. A record naming a task the data lacks (`task-7` where ids look like
`dev-013`) is valid, and stored, but a batch of it could only fail (`LookupError` three times,
then `failed`): such failures are counted as unreplayable and kept out of batches.

When the data is not there at all (a daemon that only ingests) nothing can be told and every
failure is let through, as before: the batch fails later with the data root's own message."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from harness_r1.daemon.tasks import TaskIndex
from harness_r1.envs import env_names, get_suite

log = structlog.get_logger(__name__)
#: Seconds between warnings about a split whose data cannot be read.
RETRY_S = 300.0


class ReplayableTasks:
    """Task ids per (env, split) of the daemon's task index (the canary's: each split read
    once for both), thread-safe."""

    def __init__(self, tasks: TaskIndex, clock: Callable[[], float] = time.monotonic) -> None:
        self._tasks = tasks
        #: read once: finding the installed env plugins scans package metadata (~4 ms), too
        #: slow for every ingested failure; a plugin installed later needs a restart anyway
        self._envs = env_names()
        self._ids: dict[tuple[str, str], frozenset[str] | str] = {}  # ids, or why none
        self._lock = threading.Lock()
        self._no_data: str | None = None
        self._clock = clock
        self._unreadable: dict[tuple[str, str], float] = {}  # last warned, per split

    def why_not(self, env: str, split: str, task_id: str) -> str | None:
        """None when the canary can replay the task (or there is no data to tell); else why
        not, with the ids the split does hold."""
        if env not in self._envs:
            return f"env {env!r} is not one this daemon replays ({', '.join(self._envs)})"
        ids = self._split_ids(env, split)
        if ids is None:
            return None
        if isinstance(ids, str):
            return ids
        if task_id in ids:
            return None
        example = ", ".join(sorted(ids)[:2])
        return (
            f"task {task_id!r} is not in {env}/{split} (its ids look like {example}; "
            f"`harness-r1 data tasks {env} {split}` lists them)"
        )

    def _split_ids(self, env: str, split: str) -> frozenset[str] | str | None:
        with self._lock:
            if self._no_data is not None:
                return None
            key = (env, split)
            if key not in self._ids:
                if not self._has_data():
                    return None
                suite = get_suite(env)
                if split not in suite.splits:
                    self._ids[key] = (
                        f"split {split!r} is not one of {env}'s ({', '.join(suite.splits)})"
                    )
                else:
                    try:
                        tasks = self._tasks.split(env, split)
                    except Exception as err:  # noqa: BLE001 - DataError, OSError, a bad file
                        # cannot tell: let the failure through (its batch fails with the data's
                        # own message) and look again later (after `harness-r1 data fetch`)
                        now = self._clock()
                        if now - self._unreadable.get(key, -RETRY_S) >= RETRY_S:
                            self._unreadable[key] = now
                            log.warning(
                                "replay_check_unreadable",
                                env=env,
                                split=split,
                                error=f"{type(err).__name__}: {err}"[:300],
                            )
                        return None
                    self._ids[key] = frozenset(t.task_id for t in tasks)
            return self._ids[key]

    def _has_data(self) -> bool:
        try:
            self._tasks.data_root  # noqa: B018 - resolves the root (once) or says why not
        except (SystemExit, RuntimeError, OSError) as err:
            self._no_data = str(err)
            log.warning("replay_check_off", reason=f"no benchmark data: {err}"[:300])
            return False
        return True
