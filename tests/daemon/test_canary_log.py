"""The daemon's canary progress lines: one when episodes are planned, then at most one per
interval and one when the planned episodes are done; a canary that never finished (cancelled
by a stop) does not leave its count to the next one."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from harness_r1.daemon.canary_log import STALE_S, LoggedCanaryProgress


class _Trajectory:
    class task:  # noqa: N801 - the attribute path the progress reads
        env = "dbbench"

    harness_version = "base"


def test_progress_lines_at_most_every_interval_and_at_the_end() -> None:
    now = [0.0]
    progress = LoggedCanaryProgress(interval_s=30, clock=lambda: now[0])
    episode: Any = _Trajectory()
    with capture_logs() as logs:
        progress.planned(10)
        for second in range(10):
            now[0] = 10.0 * (second + 1)
            progress.finished(episode)
    done = [(e["event"], e.get("done")) for e in logs]
    assert done == [("canary_planned", 0), ("canary_progress", 3), ("canary_progress", 6),
                    ("canary_progress", 9), ("canary_progress", 10)]  # fmt: skip


def test_a_canary_left_unfinished_does_not_count_into_the_next() -> None:
    now = [0.0]
    progress = LoggedCanaryProgress(clock=lambda: now[0])
    with capture_logs() as logs:
        progress.planned(8)
        progress.finished(_Trajectory())  # type: ignore[arg-type]
        now[0] = STALE_S + 1  # cancelled: 7 episodes never came
        progress.planned(4)
    assert logs[-1]["event"] == "canary_planned" and logs[-1]["planned"] == 4
