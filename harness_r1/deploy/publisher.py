"""Publishing signed releases and control commands, with the registry kept in step.

Order of operations: plan (validate the registry transition), allocate the seq, sign, publish
and wait for the broker's ack, and only then record the new state in the registry. A publish
that fails leaves the registry as it was (a seq is then skipped, which clients tolerate:
they need seqs to grow, not to be dense).

Recording after the publish never fails on a race: the daemon's control follower may have read
the command from the topic and recorded it first (expected), another operator's newer command
may have been recorded meanwhile, the live guard may have moved the overlay. `record_control`
(shared with the follower) and the release moves are conditional and run in one registry
transaction each. A command that went out is never reported as failed: if the registry cannot
be written at all, the publisher logs it and the daemon's follower records it from the topic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.exc import SQLAlchemyError

from harness_r1.contracts import INGEST_TARGET_PREFIX, ControlCommand, ControlKind, OverlayRelease
from harness_r1.deploy.client import CONTROL_TOPIC, RELEASE_TOPIC
from harness_r1.deploy.registry import (
    InvalidTransition,
    OverlayRecord,
    OverlayRegistry,
    OverlayState,
    RegistryError,
    UnknownOverlay,
    check_transition,
)
from harness_r1.deploy.signing import Signer, seal
from harness_r1.deploy.state import BASE

log = structlog.get_logger(__name__)

#: (topic, value, key) -> None; raises when the broker did not acknowledge.
Send = Callable[[str, bytes, bytes | None], None]


@dataclass(frozen=True)
class PublisherConfig:
    release_topic: str = RELEASE_TOPIC
    control_topic: str = CONTROL_TOPIC
    validity: timedelta = timedelta(hours=1)  # how long a message may still be accepted


class DeployMetrics:
    """Promotions, releases and rollbacks by reason (the operator's view of deploy)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.releases = Counter(
            "harness_r1_overlay_releases",
            "Signed overlay releases published, by stage (canary or full)",
            ["stage"],
            registry=registry,
        )
        self.promotions = Counter(
            "harness_r1_overlay_promotions",
            "Overlays promoted to every agent of their pool, by actor",
            ["actor"],
            registry=registry,
        )
        self.rollbacks = Counter(
            "harness_r1_overlay_rollbacks",
            "Rollback commands published, by reason (operator, live_guard, ...)",
            ["reason"],
            registry=registry,
        )
        self.controls = Counter(
            "harness_r1_overlay_control_commands",
            "Signed control commands published, by command",
            ["command"],
            registry=registry,
        )


def rollback_label(reason: str) -> str:
    """A bounded label for a free-text reason: live_guard_inconclusive, live_guard, operator."""
    for code in ("live_guard_inconclusive", "live_guard"):
        if reason.startswith(code):
            return code
    return "operator"


def _moves(current: OverlayState, to_state: OverlayState) -> list[OverlayState]:
    """Registry states a release passes through: a candidate released to every agent at once
    still passes through canary, so its history says it was released before it was active."""
    if current == to_state:
        return []
    if current is OverlayState.CANDIDATE and to_state is OverlayState.ACTIVE:
        return [OverlayState.CANARY, OverlayState.ACTIVE]
    check_transition(current, to_state)
    return [to_state]


class Publisher:
    def __init__(
        self,
        registry: OverlayRegistry,
        signer: Signer,
        send: Send,
        config: PublisherConfig | None = None,
        metrics: DeployMetrics | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.registry = registry
        self.signer = signer
        self._send = send
        self.config = config or PublisherConfig()
        self._metrics = metrics
        self._now = now
        # seq allocation and the send happen under one lock, so two threads of this process
        # (a canary worker releasing, the guard job promoting) cannot publish out of seq order
        # (clients would refuse the lower seq as a replay). Across processes: one publisher.
        self._lock = threading.RLock()
        #: What recording the latest control command in the registry came to (see
        #: record_control); "not_recorded" when the registry could not be written (the
        #: daemon's control follower records it from the topic).
        self.last_recorded: str | None = None

    def release(
        self, overlay_id: str, *, fraction: float = 1.0, actor: str, reason: str
    ) -> OverlayRelease:
        """Release an overlay to a fraction of its pool (canary) or to all of it (active)."""
        with self._lock:
            return self._release(overlay_id, fraction=fraction, actor=actor, reason=reason)

    def _release(
        self, overlay_id: str, *, fraction: float, actor: str, reason: str
    ) -> OverlayRelease:
        record = self.registry.get(overlay_id)
        if record.state in (OverlayState.ROLLED_BACK, OverlayState.RETIRED):
            raise InvalidTransition(
                f"{overlay_id} is {record.state.value}: clients refuse a release of an overlay "
                "taken back; bring it back with `overlay pin --to` instead"
            )
        to_state = OverlayState.ACTIVE if fraction >= 1.0 else OverlayState.CANARY
        moves = _moves(record.state, to_state)  # refuse an impossible move before sending
        with self._fence(record.target, "release"):
            issued = self._now()
            payload = OverlayRelease(
                overlay_id=overlay_id,
                target=record.target,
                seq=self.registry.next_seq(record.target, "release"),
                key_id=self.signer.key_id,
                issued_at=issued,
                expires_at=issued + self.config.validity,
                patch_sha256=record.patch.sha256(),
                patch=record.patch,
                rollout_fraction=fraction,
                parent_overlay_id=record.parent_overlay_id,
            )
            self._publish(self.config.release_topic, payload)
        evidence = {"seq": payload.seq, "rollout_fraction": fraction}
        with self.registry.transaction():
            # Each move only from the state planned above: if another writer moved the overlay
            # meanwhile (an operator rolled it back), the release does not bring it back.
            expected: OverlayState = record.state
            for state in moves:
                moved = self.registry.transition_if(
                    overlay_id,
                    state,
                    expect={expected},
                    actor=actor,
                    reason=reason,
                    evidence=evidence,
                )
                if moved is None:
                    log.warning(
                        "overlay_release_not_recorded",
                        overlay_id=overlay_id,
                        seq=payload.seq,
                        state=str(self.registry.get(overlay_id).state),
                        wanted=str(state),
                    )
                    break
                expected = state
            if not moves and record.evidence.get("rollout_fraction") != fraction:
                # a canary released again at another fraction (widened by an operator): record
                # it, or re-announcements would go on publishing the old fraction
                self.registry.record_event(
                    overlay_id,
                    actor=actor,
                    reason=reason,
                    evidence=evidence,
                    merge_evidence=True,
                )
        stage = "full" if to_state is OverlayState.ACTIVE else "canary"
        if self._metrics:
            self._metrics.releases.labels(stage=stage).inc()
            if stage == "full":
                self._metrics.promotions.labels(actor=actor).inc()
        log.info("overlay_released", overlay_id=overlay_id, seq=payload.seq, fraction=fraction)
        return payload

    def control(
        self,
        command: ControlKind,
        target: str,
        *,
        actor: str,
        reason: str,
        overlay_id: str | None = None,
        revoke_overlay_id: str | None = None,
    ) -> ControlCommand:
        """Publish a signed rollback / pin / pause / resume and record it in the registry.

        A rollback with no overlay named takes back the pool's newest overlay in canary or
        active state."""
        with self._lock:
            return self._control(
                command,
                target,
                actor=actor,
                reason=reason,
                overlay_id=overlay_id,
                revoke_overlay_id=revoke_overlay_id,
            )

    def skip_offset(
        self, group: str, topic: str, partition: int, offset: int, *, actor: str, reason: str
    ) -> ControlCommand:
        """Publish a signed order for the daemons ingesting as `group` to read `topic`'s
        `partition` from `offset` on (forward only): the operator's way past a record their
        Kafka client cannot get past. Signed, seq-numbered and expiring like every control
        command; the daemon's control follower applies it and reports it on the events topic."""
        order = (ControlKind.SKIP_OFFSET, group, topic, partition, offset)
        return self._ingest_order(*order, actor=actor, reason=reason)

    def reset_offset(
        self, group: str, topic: str, partition: int, offset: int, *, actor: str, reason: str
    ) -> ControlCommand:
        """Publish a signed order for the daemons ingesting as `group` to read `topic`'s
        `partition` from `offset` on, back or forward: the operator's answer to a partition
        whose log the broker reset under the daemon (it stops ingesting such a partition)."""
        order = (ControlKind.RESET_OFFSET, group, topic, partition, offset)
        return self._ingest_order(*order, actor=actor, reason=reason)

    def _ingest_order(
        self,
        kind: ControlKind,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        *,
        actor: str,
        reason: str,
    ) -> ControlCommand:
        with self._lock:
            return self._control(
                kind,
                f"{INGEST_TARGET_PREFIX}{group}",
                actor=actor,
                reason=reason,
                overlay_id=None,
                revoke_overlay_id=None,
                skip=(topic, partition, offset),
            )

    def _control(
        self,
        command: ControlKind,
        target: str,
        *,
        actor: str,
        reason: str,
        overlay_id: str | None,
        revoke_overlay_id: str | None,
        skip: tuple[str, int, int] | None = None,
    ) -> ControlCommand:
        if command is ControlKind.ROLLBACK and revoke_overlay_id is None:
            revoke_overlay_id = self._newest_live(target)
        if (
            command is ControlKind.ROLLBACK
            and overlay_id is not None
            and overlay_id == (revoke_overlay_id)
        ):
            raise ValueError(f"cannot roll {overlay_id} back to itself")
        # unknown ids or impossible moves: a clear error before anything is sent
        for named in (overlay_id, revoke_overlay_id):
            if named is not None and named != BASE:
                self.registry.get(named)
        moves_to = command in (ControlKind.ROLLBACK, ControlKind.PIN)
        if moves_to and overlay_id not in (None, BASE):
            state = self.registry.get(overlay_id).state
            if state is not OverlayState.ACTIVE:
                check_transition(state, OverlayState.ACTIVE)
        with self._fence(target, "control"):
            issued = self._now()
            payload = ControlCommand(
                command=command,
                command_id=f"{target}:{command.value}:{issued.timestamp():.6f}",
                target=target,
                seq=self.registry.next_seq(target, "control"),
                key_id=self.signer.key_id,
                issued_at=issued,
                expires_at=issued + self.config.validity,
                overlay_id=overlay_id,
                revoke_overlay_id=revoke_overlay_id,
                actor=actor,
                reason=reason,
                topic=skip[0] if skip else None,
                partition=skip[1] if skip else None,
                offset=skip[2] if skip else None,
            )
            self._publish(self.config.control_topic, payload)
        self.last_recorded = self._record_control(payload)
        if self._metrics:
            self._metrics.controls.labels(command=command.value).inc()
            if command is ControlKind.ROLLBACK:
                self._metrics.rollbacks.labels(reason=rollback_label(reason)).inc()
        log.info(
            "overlay_control_published",
            command=command.value,
            target=target,
            seq=payload.seq,
            overlay_id=overlay_id,
            revoke=revoke_overlay_id,
            actor=actor,
            reason=reason,
        )
        return payload

    def _newest_live(self, target: str) -> str | None:
        for state in (OverlayState.CANARY, OverlayState.ACTIVE):
            found = self.registry.list(target=target, state=state)
            if found:
                return found[0].overlay_id
        return None

    def _record_control(self, command: ControlCommand) -> str:
        """Record a published command; never raises (the command is out: agents obey it).

        A database that stays locked or away is retried a few times and then left to the
        daemon's control follower, which records the command when it reads it from the topic."""
        for attempt in range(1, RECORD_ATTEMPTS + 1):
            try:
                result = record_control(self.registry, command, recorder="publisher")
            except (SQLAlchemyError, RegistryError) as err:
                log.warning(
                    "overlay_control_not_recorded",
                    seq=command.seq,
                    target=command.target,
                    attempt=attempt,
                    error=f"{type(err).__name__}: {err}"[:300],
                )
                continue
            log.info("overlay_control_recorded", seq=command.seq, result=result)
            return result
        return "not_recorded"

    @contextmanager
    def _fence(self, target: str, stream: str) -> Iterator[None]:
        """The publisher fence: a seq is taken and its message sent (acknowledged) while this
        process holds the pool's publish lock (shared through the registry's database, no
        database lock held meanwhile), so another process publishing to the same pool waits
        for its number until this message is out: messages reach the topic in seq order, and
        an agent never drops a release because a later seq overtook it."""
        with self.registry.held(f"publish:{stream}:{target}"):
            yield

    def _publish(self, topic: str, payload: OverlayRelease | ControlCommand) -> None:
        envelope = seal(payload, self.signer)
        self._send(topic, envelope.to_json_bytes(), payload.target.encode())


# --- a control command's effect on the registry ----------------------------------------------

#: How often the publisher tries to record a command it has published before leaving it to the
#: daemon's control follower.
RECORD_ATTEMPTS = 2  # each waits up to the busy timeout (30 s) on a locked SQLite
#: The registry mark of the highest control seq whose effect the registry holds, per target.
APPLIED_STREAM = "control.applied"
LIVE = (OverlayState.CANARY, OverlayState.ACTIVE)


def record_control(registry: OverlayRegistry, command: ControlCommand, *, recorder: str) -> str:
    """Bring the registry in line with what agents do on COMMAND; one transaction; no raise
    for a race. Shared by the publisher (right after publishing) and the daemon's control
    follower (when it reads the command), so whichever comes second finds the work done.

    Ordering: the command is applied only if its seq is above the target's APPLIED_STREAM
    mark, which it then becomes. Registry writes therefore go in increasing seq order, like
    the commands each agent accepts, and the last one applied is the newest command: the one
    that decides what the fleet runs. Two publishers racing may send seq 6 before seq 5; the
    registry then never applies 5 after 6 (agents refuse 5 as a replay too).

    Returns: "reconciled" (the registry changed), "already_applied" (it already held the
    effect, e.g. the other recorder was first), "superseded" (a newer command was applied
    first), "noted" (pause/resume: an audit event only), "unknown_overlay" (the rollback names
    an overlay this registry does not hold and nothing else was to do).

    The effect, mirroring `deploy/client.py`:
    - rollback: the revoked overlay (default: the target's active one), if canary or active,
      becomes rolled_back. Then `--to base` retires the active overlay; `--to ID` activates
      ID (retiring the active one); an ID this registry lacks or never released (candidate)
      means the base harness, as for agents that never received it. Without `--to`, if the
      revoked overlay was the active one, the overlay it superseded becomes active again,
      following the chain past rolled-back ones (agents: their newest earlier overlay not
      revoked); none left: the base harness.
    - pin ID: ID active as above (`base`: the active overlay retired); pin without ID keeps the
      active one. An audit event on the pinned overlay.
    - pause/resume: an audit event on the active overlay.
    - pause and pin record the target's hold (`OverlayRegistry.hold`: agents park new
      releases meanwhile), resume clears it; `overlay list/show/release` say so.
    """
    with registry.transaction():
        if not registry.advance_mark(command.target, APPLIED_STREAM, command.seq):
            held = registry.mark(command.target, APPLIED_STREAM)
            return "already_applied" if held == command.seq else "superseded"
        return _Effect(registry, command, recorder).apply()


class _Effect:
    """One command's moves inside record_control's transaction."""

    def __init__(self, registry: OverlayRegistry, command: ControlCommand, recorder: str) -> None:
        self.registry = registry
        self.command = command
        self.target = command.target
        self.actor = command.actor
        suffix = (
            "" if recorder == "publisher" else f" (seen on the control topic, seq {command.seq})"
        )
        self.reason = f"{command.reason}{suffix}"
        self.evidence: dict[str, object] = {
            "command": command.command.value,
            "seq": command.seq,
            "recorded_by": recorder,
        }
        self.changed = False

    def apply(self) -> str:
        kind = self.command.command
        if kind is ControlKind.ROLLBACK:
            return self._rollback()
        if kind is ControlKind.PIN:
            dest = self.command.overlay_id
            if dest is not None:
                self._go_to(dest)
            pinned = self._known(dest) if dest not in (None, BASE) else self._active()
            if pinned is not None:
                self._note(pinned.overlay_id)
            self._hold("pinned", pinned.overlay_id if pinned is not None else BASE)
            return "reconciled" if self.changed else "already_applied"
        active = self._active()
        if active is not None:
            self._note(active.overlay_id)
        if kind is ControlKind.PAUSE:
            self._hold("paused", None)
        elif kind is ControlKind.RESUME:
            self.registry.clear_hold(self.target)
        return "noted"

    def _hold(self, kind: str, overlay_id: str | None) -> None:
        self.registry.set_hold(
            self.target,
            kind,
            overlay_id=overlay_id,
            actor=self.actor,
            reason=self.reason,
            seq=self.command.seq,
        )

    def _rollback(self) -> str:
        active = self._active()
        revoke = self.command.revoke_overlay_id or (active.overlay_id if active else None)
        unknown = False
        if revoke is not None and revoke != BASE:
            record = self._known(revoke)
            unknown = record is None
            if record is not None and record.target == self.target:
                self._move(revoke, OverlayState.ROLLED_BACK, expect=LIVE)
        dest = self.command.overlay_id
        if dest is not None:
            self._go_to(dest)
        elif active is not None and active.overlay_id == revoke:
            self._go_to(self._previous_good(revoke) or BASE)
        if self.changed:
            return "reconciled"
        return "unknown_overlay" if unknown and dest is None else "already_applied"

    def _go_to(self, dest: str) -> None:
        """Make DEST the target's overlay (BASE: none active)."""
        record = None if dest == BASE else self._known(dest)
        if record is None or record.target != self.target or record.state is OverlayState.CANDIDATE:
            active = self._active()  # agents without DEST's release run the base harness
            if active is not None:
                self._move(active.overlay_id, OverlayState.RETIRED, expect={OverlayState.ACTIVE})
            return
        self._move(dest, OverlayState.ACTIVE)

    def _previous_good(self, overlay_id: str) -> str | None:
        seen = {overlay_id}
        current = self.registry.superseded(overlay_id)
        while current is not None and current not in seen:
            seen.add(current)
            state = self.registry.get(current).state
            if state in (OverlayState.RETIRED, OverlayState.CANARY):
                return current
            current = self.registry.superseded(current)
        return None

    def _move(
        self,
        overlay_id: str,
        to_state: OverlayState,
        expect: Collection[OverlayState] | None = None,
    ) -> None:
        moved = self.registry.transition_if(
            overlay_id,
            to_state,
            expect=expect,
            actor=self.actor,
            reason=self.reason,
            evidence=self.evidence,
        )
        self.changed = self.changed or moved is not None

    def _note(self, overlay_id: str) -> None:
        self.registry.record_event(
            overlay_id, actor=self.actor, reason=self.reason, evidence=self.evidence
        )

    def _active(self) -> OverlayRecord | None:
        return self.registry.active(self.target)

    def _known(self, overlay_id: str | None) -> OverlayRecord | None:
        if overlay_id is None:
            return None
        try:
            return self.registry.get(overlay_id)
        except UnknownOverlay:
            return None
