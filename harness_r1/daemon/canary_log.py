"""The daemon's canary progress as log lines: a canary runs for minutes, and the person on
call reading the log should see it move (and a test can see that one is under way).

`canary_planned` when a run of episodes is about to start (the baseline, the candidates, the
patch-alone control), then `canary_progress` at most every `interval_s` seconds and when the
planned episodes are all done."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from harness_r1.contracts import Trajectory

log = structlog.get_logger("harness_r1.canary")
#: Seconds without an episode after which counting starts anew.
STALE_S = 300.0


class LoggedCanaryProgress:
    """A `sandbox.canary.CanaryProgress` that logs; thread-safe (one canary per env may run
    at once on several workers)."""

    def __init__(
        self, interval_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._planned = 0
        self._done = 0
        self._last = self._active = clock()  # last line logged; last episode planned or done

    def planned(self, episodes: int) -> None:
        with self._lock:
            # a new canary counts from zero: the last one finished, or stopped long ago (a
            # cancelled or failed canary never reaches its planned count)
            idle = self._clock() - self._active >= STALE_S
            if self._done >= self._planned or idle:
                self._planned = self._done = 0
            self._planned += episodes
            self._last = self._active = self._clock()
            log.info("canary_planned", episodes=episodes, planned=self._planned, done=self._done)

    def finished(self, trajectory: Trajectory) -> None:
        with self._lock:
            self._done += 1
            now = self._active = self._clock()
            if self._done < self._planned and now - self._last < self.interval_s:
                return
            self._last = now
            log.info(
                "canary_progress",
                done=self._done,
                planned=self._planned,
                env=trajectory.task.env,
                harness=trajectory.harness_version,
            )
