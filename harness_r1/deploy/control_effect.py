"""A control command's effect on the overlay registry: `record_control`, its two recorders.

The publisher records a command right after publishing it, the daemon's control follower when
it reads it from the control topic; both call `record_control`, so whichever comes second finds
the work done. The moves mirror what agents do on the command (`deploy/client.py`).

Why a module of its own: this is the registry's side of the agents' control rules, which the
daemon applies without publishing anything; publishing a command and recording its effect
change for different reasons.
"""

from __future__ import annotations

from collections.abc import Collection

from harness_r1.contracts import BASE_HARNESS, ControlCommand, ControlKind
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import OverlayRecord, OverlayState, UnknownOverlay

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
            pinned = self._known(dest) if dest not in (None, BASE_HARNESS) else self._active()
            if pinned is not None:
                self._note(pinned.overlay_id)
            self._hold("pinned", pinned.overlay_id if pinned is not None else BASE_HARNESS)
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
        if revoke is not None and revoke != BASE_HARNESS:
            record = self._known(revoke)
            unknown = record is None
            if record is not None and record.target == self.target:
                self._move(revoke, OverlayState.ROLLED_BACK, expect=LIVE)
        dest = self.command.overlay_id
        if dest is not None:
            self._go_to(dest)
        elif active is not None and active.overlay_id == revoke:
            self._go_to(self._previous_good(revoke) or BASE_HARNESS)
        if self.changed:
            return "reconciled"
        return "unknown_overlay" if unknown and dest is None else "already_applied"

    def _go_to(self, dest: str) -> None:
        """Make DEST the target's overlay (BASE: none active)."""
        record = None if dest == BASE_HARNESS else self._known(dest)
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
