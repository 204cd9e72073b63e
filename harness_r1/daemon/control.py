"""Control commands in: the daemon reads the control topic like every agent does, verifies each
command, and brings its registry in line with what the fleet was told.

Why: operators may publish with `harness-r1 overlay ...` from another machine (another
registry), or another daemon worker may roll back; agents obey the signed command whatever
the registry says, so the registry must follow the topic, not the other way round. A command
that fails verification is counted and logged, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from harness_r1.consumers.kafka import BroadcastReader
from harness_r1.contracts import ControlCommand, ControlKind
from harness_r1.daemon.ingest import next_positions
from harness_r1.deploy.registry import OverlayRegistry, OverlayState, UnknownOverlay
from harness_r1.deploy.signing import Keyring, VerificationError, open_envelope

log = structlog.get_logger(__name__)

LIVE = (OverlayState.CANARY, OverlayState.ACTIVE)


class ControlFollower:
    """Positions are kept in the state store (group `positions_group`), so a restarted daemon
    does not replay old commands over newer states (a rollback of X replayed after a later
    `pin X` would mark X rolled back while the fleet runs it)."""

    def __init__(
        self,
        reader: BroadcastReader,
        keyring: Keyring,
        registry: OverlayRegistry,
        on_command: Callable[[str, str], None] | None = None,  # (command, result)
        save_positions: Callable[[dict[tuple[str, int], int]], None] | None = None,
    ) -> None:
        self.reader = reader
        self._save_positions = save_positions
        self.keyring = keyring
        self.registry = registry
        self._on_command = on_command
        self.seen = 0

    def poll_once(self, timeout_ms: int = 200) -> int:
        records = self.reader.poll(timeout_ms)
        for record in records:
            try:
                payload = open_envelope(record.value, self.keyring, check_validity=False)
            except VerificationError as err:
                self._report("unknown", f"rejected_{err.reason.value}")
                log.warning("control_command_rejected", reason=err.reason.value)
                continue
            if isinstance(payload, ControlCommand):
                self._report(payload.command.value, self.reconcile(payload))
        self.seen += len(records)
        if records and self._save_positions is not None:
            self._save_positions(next_positions(records))
        return len(records)

    def reconcile(self, command: ControlCommand) -> str:
        """Apply a verified command's effect on overlay states if the registry lacks it."""
        if command.command is not ControlKind.ROLLBACK or command.revoke_overlay_id is None:
            return "noted"
        try:
            record = self.registry.get(command.revoke_overlay_id)
        except UnknownOverlay:
            return "unknown_overlay"
        if record.state not in LIVE:
            return "already_applied"
        self.registry.transition(
            record.overlay_id,
            OverlayState.ROLLED_BACK,
            actor=command.actor,
            reason=f"{command.reason} (seen on the control topic, seq {command.seq})",
        )
        return "reconciled"

    def _report(self, command: str, result: str) -> None:
        if self._on_command is not None:
            self._on_command(command, result)
