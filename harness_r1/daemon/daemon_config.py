"""The daemon process's plain config: the one place its defaults live.

How many canary workers, how often each scheduled job runs, how ingest backs off, holds its
lease and treats a log the broker reset.

A module of its own: the process, its scheduler and the wiring that builds both from the
settings all read it, so it sits below them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DaemonConfig:
    key: str = "main"  # names this daemon's scheduler jobs (one per process)
    canary_workers: int = 1
    flush_interval_s: float = 10.0
    guard_interval_s: float = 30.0
    grpo_check_interval_s: float = 60.0
    grpo_cron: str | None = None
    retention_days: float = 30.0
    drain_timeout_s: float = 30.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    lag_interval_s: float = 1.0  # lag is re-read after a poll (failing or not) this often
    stuck_after_s: float = 60.0  # a partition behind its end that long without progress
    #: One ingesting daemon per consumer group on a state store: the name of the store lock
    #: it holds while ingesting (None: no lock, tests). Another daemon waits as a standby.
    ingest_lock: str | None = None
    ingest_lease_s: float = 15.0
    standby_retry_s: float = 5.0
    announce_interval_s: float = 20 * 60.0  # a third of a release's validity (1 h)
    jobstore_url: str | None = None  # None: in-memory (tests); the state URL in production
    #: What a partition whose log the broker reset under the stored position gets: "stop"
    #: (held, not ready, until `harness-r1 ingest reset`) or "earliest" (read again from the
    #: log's start, duplicates dropped by trajectory id).
    on_log_reset: str = "stop"
