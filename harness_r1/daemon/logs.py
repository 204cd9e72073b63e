"""The daemon's logs: structlog and the standard library's logging routed to one handler, in
one shape.

Lines from kafka-python, SQLAlchemy or APScheduler are rendered through the same handler and
come out in the same JSON shape as ours. Ids bound with
`structlog.contextvars.bound_contextvars(packet_id=..., overlay_id=..., group_id=...)` appear
in every line written inside the block, whoever writes it. Routine library chatter is
quietened, and a library's repeated message is written once per interval with a count
(`RepeatFilter`).

A module of its own: every entry point (the daemon, the demo, the CLI) configures logging,
and none of them needs the metrics or the HTTP server for that.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

import structlog

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# Loggers of libraries whose INFO lines are routine chatter (kafka-python logs every
# connection and metadata refresh: ~65% of a daemon's log at info); they log warnings up.
QUIET_LIBRARIES = ("kafka", "apscheduler.scheduler", "apscheduler.executors")

_HANDLER_NAME = "harness-r1"


def configure_logging(
    format: str = "json", level: str = "info", stream: TextIO | None = None
) -> logging.Handler:
    """Route structlog and the standard library's logging to one handler on `stream`
    (default stderr): `json` writes one object a line with timestamp (ISO, UTC), level,
    logger and the bound context vars; `console` is for a terminal.

    Calling it again replaces the handler it installed before (so tests and a reloaded
    config do not double every line); the handler is returned so a caller can remove it."""
    level_no = _level_number(level)
    if format not in ("json", "console"):
        raise ValueError(f"log format {format!r} is neither 'json' nor 'console'")
    out = stream if stream is not None else sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: list[Any]
    if format == "json":
        renderer = [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=out.isatty())]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(RepeatFilter())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_no)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level_no, logging.WARNING))
    return handler


class RepeatFilter(logging.Filter):
    """One line per `interval_s` for a library's repeated message, with a count.

    A broker that is down makes kafka-python write the same warning (`No node available for
    metadata refresh`) ~15 times a second: ~880 lines a minute drown everything else. Records
    of the loggers under `libraries` are keyed by logger and message template; within
    `interval_s` of one that passed, the same key is counted and dropped; the next one after
    the interval passes with `(repeated N times in the last S s)` appended. The daemon's own
    lines always pass."""

    def __init__(
        self,
        interval_s: float = 60.0,
        libraries: tuple[str, ...] = ("kafka",),
        clock: Any = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.libraries = libraries
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not any(
            record.name == lib or record.name.startswith(lib + ".") for lib in self.libraries
        ):
            return True
        key = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            passed_at, dropped = self._seen.get(key, (None, 0))
            if passed_at is not None and now - passed_at < self.interval_s:
                self._seen[key] = (passed_at, dropped + 1)
                return False
            self._seen[key] = (now, 0)
        if dropped and passed_at is not None:
            since = now - passed_at
            record.msg = f"{record.msg} (repeated {dropped} times in the last {since:.0f} s)"
        return True


def _level_number(level: str) -> int:
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
    return int(getattr(logging, level.upper()))
