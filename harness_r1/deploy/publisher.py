"""Publishing signed releases and control commands, with the registry kept in step.

Order of operations: plan (validate the registry transition), allocate the seq, sign, publish
and wait for the broker's ack, and only then record the new state in the registry. A publish
that fails leaves the registry as it was (a seq is then skipped, which clients tolerate:
they need seqs to grow, not to be dense).

Recording after the publish never fails on a race: the daemon's control follower may have read
the command from the topic and recorded it first (expected), another operator's newer command
may have been recorded meanwhile, the live guard may have moved the overlay. `record_control`
(shared with the follower, in `control_effect.py`) and the release moves are conditional and run
in one registry transaction each. A command that went out is never reported as failed: if the
registry cannot be written at all, the publisher logs it and the daemon's follower records it
from the topic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.exc import SQLAlchemyError

from harness_r1.contracts import (
    BASE_HARNESS,
    INGEST_TARGET_PREFIX,
    ControlCommand,
    ControlKind,
    OverlayRelease,
)
from harness_r1.deploy.client import CONTROL_TOPIC, RELEASE_TOPIC
from harness_r1.deploy.control_effect import record_control
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import (
    InvalidTransition,
    OverlayState,
    RegistryError,
    check_transition,
)
from harness_r1.deploy.signing import Signer, seal

log = structlog.get_logger(__name__)

#: (topic, value, key) -> None; raises when the broker did not acknowledge.
Send = Callable[[str, bytes, bytes | None], None]

#: How often the publisher tries to record a command it has published before leaving it to the
#: daemon's control follower.
RECORD_ATTEMPTS = 2  # each waits up to the busy timeout (30 s) on a locked SQLite


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
            if named is not None and named != BASE_HARNESS:
                self.registry.get(named)
        moves_to = command in (ControlKind.ROLLBACK, ControlKind.PIN)
        if moves_to and overlay_id not in (None, BASE_HARNESS):
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
