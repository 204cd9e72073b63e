"""How the demo talks: one progress bar per phase (counts, elapsed, ETA), one line per event,
phase timings kept for the summary, and everything else (library warnings, Kafka's INFO lines,
tqdm bars of model loading, the daemon's structured log) in the run folder's log file.

Why the file descriptor and not only the logging config: model loading and the hook workers
write to stderr from C code and child processes, which no logging handler sees. While the demo
runs, fd 2 points at the log file; the console writes to stdout.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harness_r1.contracts import Trajectory


@contextmanager
def stderr_to(log_path: Path) -> Iterator[TextIO]:
    """Point fd 2 (and the daemon's log) at `log_path` for the duration; restore after."""
    from harness_r1.daemon import configure_logging

    log_path.parent.mkdir(parents=True, exist_ok=True)
    stream = log_path.open("a", buffering=1, encoding="utf-8")
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(stream.fileno(), 2)
    handler = configure_logging("json", "info", stream=stream)
    try:
        yield stream
    finally:
        import logging

        logging.getLogger().removeHandler(handler)
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        stream.close()


class PhaseBar:
    """One phase's bar: `advance` as work finishes, `plan` when more work becomes known (the
    canary learns its total as it goes), `status` for what the phase is waiting on. Safe to
    call from any thread (the canary reports from the daemon's worker)."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task
        self._lock = threading.Lock()
        self._total = 0
        self._status = ""

    def plan(self, n: int) -> None:
        with self._lock:
            self._total += n
            self._progress.update(self._task, total=self._total)

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)

    def status(self, text: str) -> None:
        if text != self._status:
            self._status = text
            self._progress.update(self._task, status=text)

    # `sandbox.canary.CanaryProgress`
    def planned(self, episodes: int) -> None:
        self.plan(episodes)

    def finished(self, trajectory: Trajectory) -> None:
        self.advance()


class CanaryRelay:
    """The canary's progress, relayed to whichever bar is current (the daemon's canary outlives
    any one phase; episodes with no bar open are ignored)."""

    def __init__(self) -> None:
        self.bar: PhaseBar | None = None

    def planned(self, episodes: int) -> None:
        if self.bar is not None:
            self.bar.plan(episodes)

    def finished(self, trajectory: Trajectory) -> None:
        if self.bar is not None:
            self.bar.advance()


class Narrator:
    """The demo's console: events as lines, phases as bars, and the phases' wall times."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.timings: dict[str, float] = {}
        self._last = ""

    def say(self, text: str) -> None:
        """Print an event line, never the same line twice in a row."""
        if text != self._last:
            self._last = text
            self.console.print(text, highlight=False)

    @contextmanager
    def phase(self, name: str, total: int | None = None) -> Iterator[PhaseBar]:
        progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("episodes"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=False,
        )
        started = time.monotonic()
        with progress:
            task = progress.add_task(name, total=total, status="")
            bar = PhaseBar(progress, task)
            if total:
                bar._total = total
            try:
                yield bar
            finally:
                progress.update(task, status="")
        self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - started
