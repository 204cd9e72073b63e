"""The daemon process: ingest, canary workers, scheduled jobs, metrics and health, one stop.

Threads: one ingest loop (Kafka -> store), `canary_workers` loop workers (claim a batch,
evaluate it, finish it), apscheduler's jobs (flush windows, live guard, GRPO update,
retention) on a persistent job store, and the health/metrics HTTP server. `stop()` (SIGTERM,
SIGINT) drains: the ingest loop finishes its poll (whose store transaction and commit make it
durable), workers finish their batch within `drain_timeout_s` or leave it to its lease (it is
retried by whoever claims it next), the scheduler stops without starting new jobs, then the
process exits. Nothing in flight is lost: everything consumed is in the store before the
offset moves.

What is not a thread of the process lives beside it: its config (daemon_config.py), ingest's
progress bookkeeping (ingest_progress.py) and the scheduler (scheduler.py). `run_job` stays
here: the job store holds it by its text reference, "harness_r1.daemon.service:run_job".
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import structlog

from harness_r1.consumers import split_position_key
from harness_r1.daemon.control import ControlFollower
from harness_r1.daemon.daemon_config import DaemonConfig
from harness_r1.daemon.ingest import TrajectoryIngest
from harness_r1.daemon.ingest_progress import IngestSink, LogEnds, PartitionProgress
from harness_r1.daemon.loop import ImprovementLoop
from harness_r1.daemon.scheduler import build_scheduler
from harness_r1.daemon.store import IngestLease, IngestLeaseLost, StateStore

log = structlog.get_logger(__name__)

#: Running daemons by key, so persistent scheduler jobs (stored as text references) find them.
_RUNNING: dict[str, Daemon] = {}


def run_job(daemon_key: str, name: str) -> None:
    """The callable apscheduler stores: look the daemon up, run one named job."""
    daemon = _RUNNING.get(daemon_key)
    if daemon is None:
        log.warning("job_without_daemon", job=name)
        return
    daemon.run_job(name)


class Daemon:
    def __init__(
        self,
        store: StateStore,
        ingest_factory: Callable[[IngestLease | None], TrajectoryIngest],
        loop: ImprovementLoop,
        config: DaemonConfig | None = None,
        sink: IngestSink | None = None,
        grpo_update: Callable[[], int] | None = None,
        engineer_refresh: Callable[[], str | None] | None = None,
        control_factory: Callable[[], ControlFollower] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.store = store
        self._ingest_factory = ingest_factory
        self.loop = loop
        self.config = config or DaemonConfig()
        self.sink = sink or IngestSink()
        self._grpo_update = grpo_update
        self._engineer_refresh = engineer_refresh
        self._control_factory = control_factory
        self._stop = threading.Event()
        # set at stop: the canary under way ends at its next decision round and its batch is
        # handed back (the canary runners hold the same event)
        self.cancel = cancel or threading.Event()
        self._threads: list[threading.Thread] = []
        self.left_running: list[str] = []  # threads still alive after the last stop
        self._scheduler: Any = None
        self.ingest: TrajectoryIngest | None = None
        self.worker_ids = [
            f"{self.config.key}-{uuid.uuid4().hex[:6]}-w{i}"
            for i in range(self.config.canary_workers)
        ]
        self._store_ok = True
        self._store_error: str | None = None
        self._progress = PartitionProgress(self.config.stuck_after_s)
        self._log_ends = LogEnds()
        self._standby = False
        self._reopen_requested = threading.Event()
        self._held_reported: set[str] = set()
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease = (
            None
            if self.config.ingest_lock is None
            else IngestLease(self.config.ingest_lock, self.instance, self.config.ingest_lease_s)
        )
        self.ingest_reopens = 0  # how often ingest restarted from the store's positions

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        _RUNNING[self.config.key] = self
        self.ingest = self._ingest_factory(self.lease)
        self._spawn("ingest", self._ingest_loop)
        if self._control_factory is not None:
            follower = self._control_factory()
            self._spawn("control", lambda: self._control_loop(follower))
        for worker in self.worker_ids:
            self._spawn(worker, functools.partial(self._worker_loop, worker))
        self._scheduler = build_scheduler(self.config)
        log.info("daemon_started", workers=len(self.worker_ids))

    def stop(self) -> None:
        """Drain and stop within drain_timeout_s (see the module docstring)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.cancel.set()
        deadline = time.monotonic() + self.config.drain_timeout_s
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        self.left_running = stuck
        if stuck:
            # a worker still inside a model call past the drain: hand its batch back now, so
            # another daemon takes it at once (the attempt not counted)
            handed = self.loop.hand_back_all()
            log.warning("daemon_stop_left_threads", threads=stuck, batches_handed_back=handed)
        if self.ingest is not None and not any(
            t.name == "ingest" for t in self._threads if t.is_alive()
        ):
            self.ingest.close()
        _RUNNING.pop(self.config.key, None)
        log.info("daemon_stopped")

    def run_forever(self) -> None:
        """Start, wait for SIGTERM/SIGINT, drain, return."""

        def handle(signum: int, frame: FrameType | None) -> None:
            log.info("daemon_signal", signal=signal.Signals(signum).name)
            self.cancel.set()
            self._stop.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        self.start()
        while not self._stop.wait(0.5):
            pass
        self._stop.clear()
        self.stop()

    def request_ingest_reopen(self) -> None:
        """Make the ingest loop start again from the store's positions (after an operator
        moved them: `harness-r1 ingest skip`)."""
        self._reopen_requested.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def ready(self) -> tuple[bool, str]:
        """Ready = the store answers and the broker was reached by the ingest reader."""
        if self.ingest is None:
            return False, "not started"
        ingest_thread = next((t for t in self._threads if t.name == "ingest"), None)
        if ingest_thread is not None and not ingest_thread.is_alive() and not self.stopping:
            return False, "the ingest thread has stopped (see the log)"
        if self._standby:
            return True, f"standby: another daemon holds {self.config.ingest_lock}"
        if not self.ingest.reader.connected:
            return False, f"broker unreachable: {self.ingest.reader.last_error or 'connecting'}"
        reader = self.ingest.reader
        if reader.missing_topics:
            missing = ", ".join(reader.missing_topics)
            return False, f"topic {missing} missing from the broker (`harness-r1 topics create`)"
        if reader.held:
            return False, "; ".join(
                f"ingest of {key} stopped: {why} (`harness-r1 ingest reset --partition "
                f"{split_position_key(key)[1]} --to earliest|latest`)"
                for key, why in reader.held.items()
            )
        why = self._store_error or self.ingest.reader.last_error or "no error reported"
        stuck = [f"{line} ({why})" for line in self._progress.stuck(time.monotonic())]
        if not self._store_ok:
            return False, "; ".join([f"state store failing ({self._store_error})", *stuck])
        if stuck:
            return False, "; ".join(stuck)
        return True, "ready"

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- threads -------------------------------------------------------------------------------

    def _ingest_loop(self) -> None:
        """Ingest while holding the group's ingest lease (DaemonConfig.ingest_lock), never
        dying: an error anywhere in here is logged and the loop starts over after a wait.

        Why a lease in the store and not a Kafka consumer group: joins take ~23 s on tansu
        and a member closed during a join wedged the group (BENCHMARKS.md, DESIGN.md), and
        the store is the source of truth for positions anyway. The lease is checked and
        renewed inside every ingest transaction, so a daemon that lost it (paused longer than
        its ttl, cut off from the database) cannot write after another took over. A standby
        polls nothing; it takes over from the stored positions within standby_retry_s of a
        clean stop (the lease is released) or ttl_s + standby_retry_s of a crash."""
        first = True
        while not self._stop.is_set():
            try:
                if self.lease is not None and not self.store.acquire_ingest_lease(self.lease):
                    if not self._standby:
                        log.info("ingest_standby", lock=self.lease.name)
                        self.sink.broker_reachable(True)  # not polling: nothing to say
                    self._standby = True
                    first = False  # the reader opened at start is stale by takeover time
                    self._stop.wait(self.config.standby_retry_s)
                    continue
                if not first:
                    log.info("ingest_taken_over", lock=self.config.ingest_lock)
                    assert self.ingest is not None
                    self.ingest = self._reopen_ingest(self.ingest)
                self._standby = False
                first = False
                self._ingest_while_held()
            except Exception as err:  # noqa: BLE001 - the ingest thread must not die
                first = False
                self._store_ok = False
                self._store_error = f"ingest: {type(err).__name__}: {err}"[:300]
                log.exception("ingest_loop_error")
                self._stop.wait(self.config.backoff_max_s)
        if self.lease is not None:
            with contextlib.suppress(Exception):
                self.store.release_ingest_lease(self.lease)

    def _ingest_while_held(self) -> None:
        """Poll and store until stopped, or until the lease is lost (then return)."""
        assert self.ingest is not None
        backoff = self.config.backoff_initial_s
        lag_at = renewed_at = time.monotonic()
        lag_at -= self.config.lag_interval_s
        was_connected = True
        while not self._stop.is_set():
            if self._reopen_requested.is_set():
                self._reopen_requested.clear()
                log.info("ingest_reopened_from_store_positions")
                self.ingest = self._reopen_ingest(self.ingest)
            if time.monotonic() - lag_at >= self.config.lag_interval_s:
                lag_at = time.monotonic()
                self._update_lag(self.ingest)
            if self.lease is not None and time.monotonic() - renewed_at >= self.lease.ttl_s / 3:
                renewed_at = time.monotonic()  # idle polls renew it here, busy ones in the store
                if not self.store.acquire_ingest_lease(self.lease):
                    log.warning("ingest_lease_lost", lock=self.lease.name)
                    return
            try:
                report = self.ingest.poll_once()
            except IngestLeaseLost:
                log.warning("ingest_lease_lost", lock=self.config.ingest_lock)
                self.ingest = self._reopen_ingest(self.ingest)
                return
            except Exception as err:  # noqa: BLE001 - the store failed: retry with backoff
                self._store_ok = False
                self._store_error = f"state store: {type(err).__name__}: {err}"[:300]
                self.sink.store_error()
                log.error("ingest_store_error", error=f"{type(err).__name__}: {err}"[:500])
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.config.backoff_max_s)
                # The reader has moved past the batch that failed: start a new one from the
                # store's positions, so that batch is read again (never skipped).
                self.ingest = self._reopen_ingest(self.ingest)
                continue
            self._store_ok = True
            self._store_error = None
            backoff = self.config.backoff_initial_s
            self.sink.polled(report)
            connected = self.ingest.reader.connected
            self.sink.broker_reachable(connected)
            if not connected:
                # every poll that cannot reach the broker counts, so the error rate (and its
                # alert) stays up for the whole outage, not only at its start
                self.sink.broker_error("poll")
            if not connected and was_connected:
                log.warning("broker_unreachable", error=self.ingest.reader.last_error)
            elif connected and not was_connected:
                log.info("broker_reachable")
            was_connected = connected
            if report.records and not report.committed:
                self.sink.broker_error("commit")
            if report.committed and self.ingest.last_commit_at is not None:
                self.sink.committed(self.ingest.last_commit_at)

    def _update_lag(self, ingest: TrajectoryIngest) -> None:
        """Lag per partition, and what readiness needs to name a stuck partition. Runs
        whether the last poll worked or not: lag matters most while ingest fails. Also
        re-reads the store's positions: one moved ahead of the reader (an operator's skip,
        applied by whichever daemon's control follower read it) restarts the reader there.
        Never raises: a failure here is logged and tried again next time."""
        try:
            ends = ingest.reader.end_offsets()
            ingest.reader.hold_positions_past(ends)
            self._on_held(ingest)
            reader = ingest.reader.positions()
            lag = self._log_ends.lag(ends, ingest.reader.fetched_ends(), reader)
            if lag:  # {}: the broker did not answer; keep the last known values
                self.sink.lag(lag)
                self._progress.observe(reader, lag, time.monotonic())
            stored = ingest.store.positions(ingest.config.group)
            ahead = [f"{t}:{p}" for (t, p), o in stored.items() if o > reader.get(f"{t}:{p}", 0)]
            # a held partition whose stored position moved either way: an operator's reset,
            # applied here or by another daemon's control follower
            reset = [
                key
                for key in ingest.reader.held
                if stored.get(split_position_key(key), reader.get(key, 0)) != reader.get(key, 0)
            ]
            if (ahead or reset) and not self._store_error:
                log.info("ingest_store_positions_moved", ahead=ahead, reset=reset)
                self.request_ingest_reopen()
        except Exception as err:  # noqa: BLE001 - lag is worth a log line, not the thread
            log.warning("ingest_lag_error", error=f"{type(err).__name__}: {err}"[:300])

    def _on_held(self, ingest: TrajectoryIngest) -> None:
        """Partitions the reader holds because the broker reset their log: say so once, and
        under the "earliest" policy move their stored position to the log's start and read
        again (a copy already stored is dropped by trajectory id)."""
        held = ingest.reader.held
        self.sink.partitions_held(held)
        for key in sorted(set(held) - self._held_reported):
            log.error(
                "ingest_partition_held",
                partition=key,
                reason=held[key],
                policy=self.config.on_log_reset,
            )
        self._held_reported = set(held)
        if not held or self.config.on_log_reset != "earliest":
            return
        starts = ingest.reader.start_offsets()
        for key in held:
            if key not in starts:
                continue  # the broker did not answer: next time
            topic, partition = split_position_key(key)
            before = self.store.reset_position(ingest.config.group, topic, partition, starts[key])
            log.warning(
                "ingest_position_reset",
                partition=key,
                from_offset=before,
                to_offset=starts[key],
                actor="on_log_reset=earliest",
            )
        self.request_ingest_reopen()

    def _reopen_ingest(self, old: TrajectoryIngest) -> TrajectoryIngest:
        """A new reader from the store's positions. What the old one knew about logs the
        broker reset goes with it: its holds stay, except where the stored position moved
        since (an operator's reset), so a reopen never reads a held partition from a stale
        position."""
        held, positions = old.reader.held, old.reader.positions()
        old.close()
        while not self._stop.is_set():
            try:
                ingest = self._ingest_factory(self.lease)
                self.ingest_reopens += 1
                stored = self.store.positions(ingest.config.group)
                kept = {
                    key: why
                    for key, why in held.items()
                    if stored.get(split_position_key(key), 0) == positions.get(key, 0)
                }
                ingest.reader.adopt(old.reader, kept)
                return ingest
            except Exception as err:  # noqa: BLE001 - store still down: keep trying
                log.error("ingest_reopen_failed", error=f"{type(err).__name__}: {err}"[:300])
                self._stop.wait(self.config.backoff_max_s)
        return old

    #: How often the control follower checks that its position is inside the control log.
    CONTROL_LOG_CHECK_S = 5.0

    def _control_loop(self, follower: ControlFollower) -> None:
        checked_at = time.monotonic()
        while not self._stop.is_set():
            try:
                follower.poll_once(timeout_ms=500)
                if time.monotonic() - checked_at >= self.CONTROL_LOG_CHECK_S:
                    checked_at = time.monotonic()
                    # a control topic the broker reset (recreated, lost): read the new log
                    # from its start; commands applied before are refused as replays by seq
                    follower.reader.hold_positions_past(follower.reader.end_offsets())
            except Exception as err:  # noqa: BLE001 - the registry failed: wait, retry
                log.error("control_follow_error", error=f"{type(err).__name__}: {err}")
                self._stop.wait(self.config.backoff_initial_s)
        follower.reader.close()

    def _worker_loop(self, worker: str) -> None:
        while not self._stop.is_set():
            try:
                outcome = self.loop.work_once(worker)
            except Exception as err:  # noqa: BLE001 - a store error: wait, retry
                log.error("worker_error", worker=worker, error=f"{type(err).__name__}: {err}")
                self._stop.wait(self.config.backoff_initial_s)
                continue
            if outcome is None:
                self._stop.wait(0.5)

    # -- scheduled jobs ------------------------------------------------------------------------

    #: Jobs that must run once per state database, not once per daemon sharing it.
    SINGLETON_JOBS = ("guard", "grpo", "retention", "announce")

    def run_job(self, name: str) -> None:
        if name in self.SINGLETON_JOBS:
            with self.store.exclusive(f"job:{name}") as held:
                if held:
                    self._run_job(name)
                else:
                    log.info("job_skipped_held_elsewhere", job=name)
            return
        self._run_job(name)

    def _run_job(self, name: str) -> None:
        with structlog.contextvars.bound_contextvars(job=name):
            try:
                if name == "flush":
                    self.loop.flush()
                    self.sink.queue_depth(
                        self.store.pending_batches(), self.store.running_batches()
                    )
                elif name == "guard":
                    self.loop.guard_once()
                elif name == "announce":
                    self.loop.announce()
                elif name == "grpo":
                    if self._grpo_update is not None:
                        self._grpo_update()
                elif name == "engineer":
                    if self._engineer_refresh is not None:
                        self._engineer_refresh()
                elif name == "retention":
                    cutoff = datetime.now(UTC) - timedelta(days=self.config.retention_days)
                    log.info("retention", purged=self.store.purge(cutoff))
            except Exception:  # noqa: BLE001 - a job failing must not stop the scheduler
                log.exception("job_failed")
