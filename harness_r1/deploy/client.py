"""The agent-side overlay client: what a deployed agent embeds next to the harness runtime.

It reads every partition of the release and control topics itself (broadcast, no consumer
group), verifies each message (signature over the exact bytes, key, patch hash, expiry, target,
seq above the high-water mark), and swaps the overlay in force. Swaps are atomic at episode
boundaries: an episode takes a lease on the overlay in force when it starts and keeps that
HookSet to its end; a newer overlay serves only episodes that start later. The old HookSet is
closed when its last episode ends.

Semantics an operator can rely on (written down because the issue leaves them open):
- `expires_at` bounds when a message may be *accepted* (an old signed message cannot be
  replayed later); an accepted overlay stays in force after its release expires. One
  exception: an expired rollback is still applied (its seq must still be new), because it can
  only take an overlay away and an agent that was down when it went out must not keep
  running what the fleet was told to drop.
- Releases and control commands have separate seq spaces per target, each with its own
  high-water mark; a rollback marks the overlay it takes back as revoked, so a release of it
  that arrives late (the topics are not ordered against each other) is never applied. Only an
  explicit `pin` brings a revoked overlay back.
- A release with `rollout_fraction < 1` is applied only by the agents whose stable hash of
  (agent_id, overlay_id) falls under the fraction; the others stay on their overlay and are
  the live guard's control group. A later release of the same overlay with a larger fraction
  widens the cohort; cohorts are nested, so no agent flips back and forth.
- `rollback` without `--to` moves only the clients running the revoked overlay, to the newest
  earlier overlay they ran that is not revoked (or the base harness); with `--to ID` every
  client goes to ID (`base` for none). A named overlay this client never received means the
  base harness (the safe side), counted as `rollback_to_unknown`.
- `pause` keeps the current overlay and parks new releases; `pin [ID]` switches to ID (or
  keeps the current one) and parks new releases; `resume` applies the latest parked release.
- With the broker away the client keeps running on the overlay in force, and a restarted
  client comes back on the last good overlay from disk, re-verified, without the broker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter

from harness_r1.consumers import Record
from harness_r1.contracts import BASE_HARNESS, ControlCommand, ControlKind, OverlayRelease, Patch
from harness_r1.deploy.acceptance import Stream, check_seq, check_stream, open_message
from harness_r1.deploy.cohort import in_cohort
from harness_r1.deploy.signing import Keyring, Rejection, VerificationError, open_envelope
from harness_r1.deploy.state import ClientStateStore, Hold
from harness_r1.harness import HookSet, NoHooks

log = structlog.get_logger(__name__)

RELEASE_TOPIC = "harness-r1.overlay-releases"
CONTROL_TOPIC = "harness-r1.control"
HISTORY_LIMIT = 32


class MessageSource(Protocol):
    """What the client reads from (a BroadcastReader over the two topics in production)."""

    def poll(self, timeout_ms: int | None = None) -> list[Record]: ...

    def positions(self) -> dict[str, int]: ...

    def close(self) -> None: ...


SourceFactory = Callable[[Mapping[str, int]], MessageSource]
HooksFactory = Callable[[Patch, str], HookSet]


@dataclass(frozen=True)
class ClientConfig:
    agent_id: str
    target: str
    state_dir: Path
    release_topic: str = RELEASE_TOPIC
    control_topic: str = CONTROL_TOPIC
    max_clock_skew_s: float = 30.0


class ClientMetrics:
    """Counters shared by every client in a process (no per-agent labels)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter(
            "harness_r1_client_messages",
            "Release and control messages read by agent-side clients, by kind and result",
            ["kind", "result"],
            registry=registry,
        )
        self.rejections = Counter(
            "harness_r1_client_rejections",
            "Messages refused by agent-side clients, by reason",
            ["reason"],
            registry=registry,
        )
        self.swaps = Counter(
            "harness_r1_client_swaps",
            "Overlay swaps in agent-side clients, by cause",
            ["cause"],
            registry=registry,
        )


@dataclass
class _Loaded:
    overlay_id: str
    hooks: HookSet
    leases: int = 0


@dataclass(frozen=True)
class OverlayLease:
    """The overlay one episode runs under, from its start to its end."""

    overlay_id: str
    hooks: HookSet


class OverlayClient:
    def __init__(
        self,
        config: ClientConfig,
        keyring: Keyring,
        hooks_factory: HooksFactory,
        source_factory: SourceFactory | None = None,
        metrics: ClientMetrics | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.keyring = keyring
        self._hooks_factory = hooks_factory
        self._metrics = metrics
        self._now = now
        self._store = ClientStateStore(config.state_dir)
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self.state = self._store.load(config.agent_id, config.target)
        self.rejections: dict[str, int] = {}
        self.swaps = 0
        self._retired: list[_Loaded] = []
        self._current = self._load_or_base(self.state.active, cause="startup")
        self._source = source_factory(dict(self.state.positions)) if source_factory else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the agent uses ---------------------------------------------------------------

    @property
    def active_overlay_id(self) -> str:
        return self._current.overlay_id

    @contextmanager
    def lease(self) -> Iterator[OverlayLease]:
        """Hold the overlay in force for one episode (or one lockstep batch of episodes)."""
        with self._lock:
            loaded = self._current
            loaded.leases += 1
        try:
            yield OverlayLease(loaded.overlay_id, loaded.hooks)
        finally:
            with self._lock:
                loaded.leases -= 1
                idle = loaded is not self._current and loaded.leases == 0
            if idle:
                self._close(loaded)

    def sync(self, timeout_ms: int = 0) -> int:
        """Read what the topics hold now, apply it, persist. Returns messages read.

        Never raises for anything the broker or a message does: a broker away shows as no
        records (the reader keeps its error); the client keeps its overlay."""
        if self._source is None:
            return 0
        with self._sync_lock:
            records = self._source.poll(timeout_ms)
            for record in records:
                self._handle_safely(record.topic, record.value)
            if records:
                self.state.positions = self._source.positions()
                self._store.save(self.state)
            return len(records)

    def start(self, interval_ms: int = 100) -> None:
        """Sync in a background thread until `close()` (none without a source: nothing to
        read)."""
        if self._thread is not None or self._source is None:
            return

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.sync(timeout_ms=interval_ms)
                except Exception:  # noqa: BLE001 - the agent must outlive any client bug
                    log.exception("overlay_client_sync_failed", agent_id=self.config.agent_id)
                    self._stop.wait(1.0)

        self._thread = threading.Thread(target=loop, name="overlay-client", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._source is not None:
            self._source.close()
        with self._lock:
            loaded = [self._current, *self._retired]
            self._retired.clear()
        for item in loaded:
            self._close_hooks(item.hooks)

    # -- message handling ------------------------------------------------------------------

    def handle(self, topic: str, data: bytes) -> bool:
        """Verify and apply one message and persist the state; True when it was accepted."""
        with self._sync_lock:
            accepted = self._handle_safely(topic, data)
            self._store.save(self.state)
        return accepted

    def _handle_safely(self, topic: str, data: bytes) -> bool:
        """One bad record (a bug, a disk error) is counted and skipped; the rest of the poll is
        still applied."""
        try:
            return self._handle(topic, data)
        except Exception as err:  # noqa: BLE001 - the agent must outlive any single message
            self._count_rejection("error")
            log.exception("overlay_message_failed", agent_id=self.config.agent_id, error=str(err))
            return False

    def _handle(self, topic: str, data: bytes) -> bool:
        kind: Stream = "release" if topic == self.config.release_topic else "control"
        try:
            payload = self._open(data, kind)
            self._check_stateful(payload, kind)
        except VerificationError as err:
            self._reject(kind, err)
            return False
        if isinstance(payload, OverlayRelease):
            self._apply_release(payload, data)
        else:
            self._apply_control(payload)
        if self._metrics:
            self._metrics.messages.labels(kind=kind, result="accepted").inc()
        return True

    def _open(self, data: bytes, kind: Stream) -> OverlayRelease | ControlCommand:
        """Verify (an expired ROLLBACK still passes; see `deploy/acceptance.py`, which the
        daemon's control follower shares so both accept the same messages)."""
        skew = timedelta(seconds=self.config.max_clock_skew_s)
        return open_message(data, self.keyring, kind, now=self._now(), max_clock_skew=skew)

    def _check_stateful(self, payload: OverlayRelease | ControlCommand, kind: Stream) -> None:
        check_stream(payload, kind)
        if payload.target != self.config.target:
            raise VerificationError(
                Rejection.WRONG_TARGET,
                f"for target {payload.target!r}, this agent serves {self.config.target!r}",
            )
        hwm = self.state.release_hwm if kind == "release" else self.state.control_hwm
        check_seq(payload, kind, hwm)

    def _reject(self, kind: str, err: VerificationError) -> None:
        reason = err.reason.value
        self._count_rejection(reason)
        if self._metrics:
            self._metrics.messages.labels(kind=kind, result="rejected").inc()
        log.warning(
            "overlay_message_rejected",
            agent_id=self.config.agent_id,
            kind=kind,
            reason=reason,
            detail=err.detail[:300],
        )

    def _count_rejection(self, reason: str) -> None:
        self.rejections[reason] = self.rejections.get(reason, 0) + 1
        if self._metrics:
            self._metrics.rejections.labels(reason=reason).inc()

    def _apply_release(self, release: OverlayRelease, data: bytes) -> None:
        state = self.state
        state.release_hwm = release.seq
        self._store.save_envelope(release.overlay_id, data)
        state.released[release.overlay_id] = max(
            release.rollout_fraction, state.released.get(release.overlay_id, 0.0)
        )
        if release.overlay_id in state.revoked:
            log.info("overlay_release_ignored_revoked", overlay_id=release.overlay_id)
            return
        if state.hold is not Hold.NONE:
            state.pending = release.overlay_id
            return
        self._apply_released(release.overlay_id)

    def _apply_released(self, overlay_id: str) -> None:
        fraction = self.state.released.get(overlay_id, 0.0)
        if in_cohort(self.config.agent_id, overlay_id, fraction):
            self._switch(overlay_id, cause="release", remember=True)

    def _apply_control(self, command: ControlCommand) -> None:
        state = self.state
        state.control_hwm = command.seq
        log.info(
            "overlay_control",
            agent_id=self.config.agent_id,
            command=command.command.value,
            overlay_id=command.overlay_id,
            actor=command.actor,
            reason=command.reason,
        )
        if command.command is ControlKind.ROLLBACK:
            self._rollback(command)
        elif command.command is ControlKind.PIN:
            dest = command.overlay_id or state.active
            if dest in state.revoked:
                state.revoked.remove(dest)
            self._switch(dest, cause="pin", remember=True)
            state.hold = Hold.PINNED
        elif command.command is ControlKind.PAUSE:
            state.hold = Hold.PAUSED
        elif command.command is ControlKind.RESUME:
            state.hold = Hold.NONE
            pending, state.pending = state.pending, None
            if pending is not None and pending not in state.revoked:
                self._apply_released(pending)

    def _rollback(self, command: ControlCommand) -> None:
        state = self.state
        revoke = command.revoke_overlay_id or (
            state.active if state.active != BASE_HARNESS else None
        )
        if revoke is not None and revoke != BASE_HARNESS and revoke not in state.revoked:
            state.revoked.append(revoke)
        if state.pending in state.revoked:
            state.pending = None
        if command.overlay_id is not None:
            self._switch(command.overlay_id, cause="rollback", remember=False)
        elif state.active == revoke:
            self._switch(self._previous_good(), cause="rollback", remember=False)

    def _previous_good(self) -> str:
        while self.state.history:
            candidate = self.state.history.pop()
            if candidate not in self.state.revoked:
                return candidate
        return BASE_HARNESS

    # -- swapping --------------------------------------------------------------------------

    def _switch(self, overlay_id: str, *, cause: str, remember: bool) -> None:
        if overlay_id == self._current.overlay_id:
            return
        try:
            loaded = self._load(overlay_id)
        except Exception as err:  # noqa: BLE001 - a HookSet that cannot start: the safe side
            log.error("overlay_load_failed", overlay_id=overlay_id, error=str(err))
            loaded = None
        if loaded is None:
            self._count_rejection("rollback_to_unknown")
            loaded = _Loaded(BASE_HARNESS, NoHooks())
        previous = self.state.active
        if remember and previous != loaded.overlay_id:
            self.state.history = [*self.state.history, previous][-HISTORY_LIMIT:]
        self.state.active = loaded.overlay_id
        with self._lock:
            old, self._current = self._current, loaded
            idle = old.leases == 0
            if not idle:
                self._retired.append(old)
        if idle:
            self._close(old)
        self.swaps += 1
        if self._metrics:
            self._metrics.swaps.labels(cause=cause).inc()
        log.info(
            "overlay_swapped",
            agent_id=self.config.agent_id,
            overlay_id=loaded.overlay_id,
            previous=previous,
            cause=cause,
        )

    def _load_or_base(self, overlay_id: str, cause: str) -> _Loaded:
        loaded = self._load(overlay_id)
        if loaded is None:
            log.warning("overlay_unloadable_using_base", overlay_id=overlay_id, cause=cause)
            self.state.active = BASE_HARNESS
            return _Loaded(BASE_HARNESS, NoHooks())
        return loaded

    def _load(self, overlay_id: str) -> _Loaded | None:
        """Build the HookSet of a stored overlay, re-verifying its envelope (not its expiry)."""
        if overlay_id == BASE_HARNESS:
            return _Loaded(BASE_HARNESS, NoHooks())
        data = self._store.load_envelope(overlay_id)
        if data is None:
            return None
        try:
            payload = open_envelope(data, self.keyring, check_validity=False, accepted_before=True)
        except VerificationError as err:
            log.error("stored_overlay_invalid", overlay_id=overlay_id, reason=err.reason.value)
            return None
        if not isinstance(payload, OverlayRelease) or payload.overlay_id != overlay_id:
            return None
        if payload.target != self.config.target:
            return None
        return _Loaded(overlay_id, self._hooks_factory(payload.patch, overlay_id))

    def _close(self, loaded: _Loaded) -> None:
        with self._lock:
            if loaded in self._retired:
                self._retired.remove(loaded)
        self._close_hooks(loaded.hooks)

    @staticmethod
    def _close_hooks(hooks: HookSet) -> None:
        close: Any = getattr(hooks, "close", None)
        if callable(close):
            close()
