"""Publishing signed releases and control commands, with the registry kept in step.

Order of operations: plan (validate the registry transition), allocate the seq, sign, publish
and wait for the broker's ack, and only then record the new state in the registry. A publish
that fails leaves the registry as it was (a seq is then skipped, which clients tolerate:
they need seqs to grow, not to be dense).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import CollectorRegistry, Counter

from harness_r1.contracts import ControlCommand, ControlKind, OverlayRelease
from harness_r1.deploy.client import CONTROL_TOPIC, RELEASE_TOPIC
from harness_r1.deploy.registry import (
    InvalidTransition,
    OverlayRegistry,
    OverlayState,
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
        for state in moves:
            self.registry.transition(
                overlay_id,
                state,
                actor=actor,
                reason=reason,
                evidence={"seq": payload.seq, "rollout_fraction": fraction},
            )
        if not moves and record.evidence.get("rollout_fraction") != fraction:
            # a canary released again at another fraction (widened by an operator): record it,
            # or re-announcements would go on publishing the old fraction
            self.registry.record_event(
                overlay_id,
                actor=actor,
                reason=reason,
                evidence={"seq": payload.seq, "rollout_fraction": fraction},
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

    def _control(
        self,
        command: ControlKind,
        target: str,
        *,
        actor: str,
        reason: str,
        overlay_id: str | None,
        revoke_overlay_id: str | None,
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
        )
        self._publish(self.config.control_topic, payload)
        self._record_control(payload)
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

    def _record_control(self, command: ControlCommand) -> None:
        registry = self.registry
        why = {"actor": command.actor, "reason": command.reason}
        evidence: dict[str, object] = {"command": command.command.value, "seq": command.seq}
        if command.command is ControlKind.ROLLBACK:
            revoked = command.revoke_overlay_id
            was_active = False
            if revoked is not None:
                state = registry.get(revoked).state
                was_active = state is OverlayState.ACTIVE
                if state in (OverlayState.CANARY, OverlayState.ACTIVE):
                    registry.transition(revoked, OverlayState.ROLLED_BACK, evidence=evidence, **why)
            if command.overlay_id == BASE:
                self._retire_active(command.target, evidence, **why)
            elif command.overlay_id is not None:
                self._activate(command.overlay_id, evidence, **why)
            elif was_active and revoked is not None:
                previous = self._superseded_by(revoked)
                if previous is not None:
                    self._activate(previous, evidence, **why)
        elif command.command is ControlKind.PIN and command.overlay_id == BASE:
            self._retire_active(command.target, evidence, **why)
        elif command.command is ControlKind.PIN and command.overlay_id is not None:
            self._activate(command.overlay_id, evidence, **why)
            registry.record_event(
                command.overlay_id, evidence=evidence, actor=command.actor, reason=command.reason
            )
        else:
            active = registry.active(command.target)
            if active is not None:
                registry.record_event(
                    active.overlay_id,
                    evidence=evidence,
                    actor=command.actor,
                    reason=command.reason,
                )

    def _retire_active(
        self, target: str, evidence: dict[str, object], *, actor: str, reason: str
    ) -> None:
        """The pool goes back to the base harness: its active overlay is retired."""
        active = self.registry.active(target)
        if active is not None:
            self.registry.transition(
                active.overlay_id,
                OverlayState.RETIRED,
                actor=actor,
                reason=reason,
                evidence=evidence,
            )

    def _superseded_by(self, overlay_id: str) -> str | None:
        """The overlay that was active before OVERLAY_ID (what clients roll back to)."""
        target = self.registry.get(overlay_id).target
        for record in self.registry.list(target=target, state=OverlayState.RETIRED):
            events = self.registry.events(record.overlay_id)
            if any(e.evidence.get("superseded_by") == overlay_id for e in events):
                return record.overlay_id
        return None

    def _activate(
        self, overlay_id: str, evidence: dict[str, object], *, actor: str, reason: str
    ) -> None:
        if self.registry.get(overlay_id).state is not OverlayState.ACTIVE:
            self.registry.transition(
                overlay_id, OverlayState.ACTIVE, actor=actor, reason=reason, evidence=evidence
            )

    def _publish(self, topic: str, payload: OverlayRelease | ControlCommand) -> None:
        envelope = seal(payload, self.signer)
        self._send(topic, envelope.to_json_bytes(), payload.target.encode())
