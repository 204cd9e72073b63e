"""The overlay registry's vocabulary: lifecycle states and their moves, records, errors.

What the registry answers with, apart from how it stores it: `OverlayState` and the allowed
moves between states (`TRANSITIONS`, `check_transition`), the records a read returns
(`OverlayRecord`, `OverlayLink`, `OverlayEvent`, `PoolHold`) and the registry's own errors.

Why a module of its own: every other registry module, the publisher and the operators' views
build on these types and the lifecycle rule, which hold no SQLAlchemy: a reader of records or of
the allowed moves needs no table definition.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from harness_r1.contracts import Patch


class OverlayState(StrEnum):
    """Where an overlay is in its life: proposed, under canary, serving, or out of service."""

    CANDIDATE = "candidate"
    CANARY = "canary"
    ACTIVE = "active"
    RETIRED = "retired"
    ROLLED_BACK = "rolled_back"


#: Allowed moves. retired/rolled_back -> active exists for an operator's `rollback --to` or
#: `pin`, which may bring back an older overlay; nothing ever returns to candidate or canary.
TRANSITIONS: dict[OverlayState, frozenset[OverlayState]] = {
    OverlayState.CANDIDATE: frozenset({OverlayState.CANARY, OverlayState.RETIRED}),
    OverlayState.CANARY: frozenset(
        {OverlayState.ACTIVE, OverlayState.ROLLED_BACK, OverlayState.RETIRED}
    ),
    OverlayState.ACTIVE: frozenset({OverlayState.RETIRED, OverlayState.ROLLED_BACK}),
    OverlayState.RETIRED: frozenset({OverlayState.ACTIVE}),
    OverlayState.ROLLED_BACK: frozenset({OverlayState.ACTIVE}),
}


class RegistryError(Exception):
    """Base of the registry's own errors."""


class UnknownOverlay(RegistryError, LookupError):
    """No overlay with that id in this registry."""


class InvalidTransition(RegistryError, ValueError):
    """A state change the lifecycle does not allow."""


def check_transition(current: OverlayState, to_state: OverlayState) -> None:
    """Raise `InvalidTransition` unless `current -> to_state` is an allowed move."""
    allowed = TRANSITIONS[current]
    if to_state not in allowed:
        names = ", ".join(sorted(str(s) for s in allowed))
        raise InvalidTransition(
            f"cannot move an overlay from {current} to {to_state}; from {current} it may go to: "
            f"{names}"
        )


def _state(value: OverlayState | str) -> OverlayState:
    try:
        return OverlayState(value)
    except ValueError as err:
        known = ", ".join(str(s) for s in OverlayState)
        raise InvalidTransition(f"unknown overlay state {value!r}; known: {known}") from err


@dataclass(frozen=True)
class OverlayRecord:
    """One overlay as stored: the patch (parsed back into the contract) and where it stands."""

    overlay_id: str
    target: str
    env: str
    patch: Patch
    patch_sha256: str
    state: OverlayState
    packet_id: str | None
    group_id: str | None
    parent_overlay_id: str | None
    evidence: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class OverlayLink:
    """One link of an overlay chain: the patch an overlay added onto its parent (what its
    engineer wrote) and, per hook, the links whose code runs in the composed overlay."""

    overlay_id: str
    patch: Patch
    contributors: dict[str, builtins.list[int]]  # per hook: 1-based positions in the chain


@dataclass(frozen=True)
class OverlayEvent:
    """One audit line. `from_state` is None for the creation; equal to `to_state` for an action
    that changed nothing (a pin, a note)."""

    overlay_id: str
    from_state: OverlayState | None
    to_state: OverlayState
    actor: str
    reason: str
    at: datetime
    evidence: dict[str, Any]


@dataclass(frozen=True)
class PoolHold:
    """A target's hold as its agents keep it (`deploy/client.py`): `paused` (the current
    overlay stays, new releases wait) or `pinned` (the pinned overlay, `base` for none, stays),
    until `overlay resume`. Recorded from the control commands, so `overlay list/show` can say
    why a release stays parked."""

    target: str
    kind: str  # paused | pinned
    overlay_id: str | None  # pinned: the overlay held (base: none)
    actor: str
    reason: str
    seq: int
    at: datetime

    def describe(self) -> str:
        what = "paused" if self.kind == "paused" else f"pinned to {self.overlay_id or 'base'}"
        return (
            f"pool {self.target} is {what} since {self.at:%Y-%m-%d %H:%M:%S} UTC by "
            f"{self.actor} (control seq {self.seq}): new releases wait on agents until "
            "`overlay resume`"
        )
