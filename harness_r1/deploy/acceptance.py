"""When a verified release or control command is accepted: the rules beyond the signature.

Why a module of its own: the agent-side client (`deploy/client.py`) and the daemon's control
follower (`daemon/control.py`) must accept exactly the same messages, or the daemon's registry
drifts from what the fleet runs (an old rollback replayed after a newer pin was once applied by
the daemon and ignored by every agent). Both call these pure functions; only where they keep
their high-water marks differs (a file per agent, a registry table for the daemon).

The rules:
- signature, key, schema, patch hash and validity window as `signing.open_envelope` checks;
- an expired ROLLBACK on the control stream is still accepted (its seq must still be new): it
  can only take an overlay away, and an agent that was down when it went out must not keep
  running what the fleet was told to drop. Every other expired message is refused;
- a release must come on the release stream and a command on the control stream;
- its seq must be above the stream's high-water mark for its target (separate seq spaces for
  releases and control commands).
The target check (an agent serves one pool) stays with the agent: the daemon follows all pools.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

import structlog

from harness_r1.contracts import ControlCommand, ControlKind, OverlayRelease
from harness_r1.deploy.signing import (
    Keyring,
    Rejection,
    SignedPayload,
    VerificationError,
    open_envelope,
)

log = structlog.get_logger(__name__)

#: The two seq spaces: one per topic, each with its own high-water mark per target.
Stream = Literal["release", "control"]


def open_message(
    data: bytes,
    keyring: Keyring,
    stream: Stream,
    *,
    now: datetime,
    max_clock_skew: timedelta,
) -> SignedPayload:
    """Verify DATA as read from STREAM's topic; an expired ROLLBACK on the control stream still
    passes (see the module docstring). Raises VerificationError."""
    try:
        return open_envelope(data, keyring, now=now, max_clock_skew=max_clock_skew)
    except VerificationError as err:
        if err.reason is not Rejection.EXPIRED or stream != "control":
            raise
        late = open_envelope(data, keyring, check_validity=False)
        if isinstance(late, ControlCommand) and late.command is ControlKind.ROLLBACK:
            log.info("expired_rollback_applied", seq=late.seq, overlay=late.revoke_overlay_id)
            return late
        raise


def check_stream(payload: SignedPayload, stream: Stream) -> None:
    """A release on the control topic (or the reverse) is refused as malformed: its seq would
    be checked against the wrong high-water mark."""
    expected = OverlayRelease if stream == "release" else ControlCommand
    if not isinstance(payload, expected):
        raise VerificationError(Rejection.MALFORMED, f"a {payload.kind} on the {stream} topic")


def check_seq(payload: SignedPayload, stream: Stream, high_water_mark: int) -> None:
    """Refuse a seq at or below the high-water mark: a replay, or an older message that arrived
    after a newer one (the newer one already decided)."""
    if payload.seq <= high_water_mark:
        raise VerificationError(
            Rejection.REPLAY,
            f"{stream} seq {payload.seq} <= high-water mark {high_water_mark}",
        )
