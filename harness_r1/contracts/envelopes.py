"""Signed envelopes for overlay releases and control commands.

The signature covers the exact payload bytes carried in the envelope (base64), so verification
never depends on how a JSON library re-serialises a parsed object.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from harness_r1.contracts.base import Message
from harness_r1.contracts.patch import Patch


class OverlayRelease(Message):
    """The payload of a release: which overlay, for which pool, in which order."""

    kind: Literal["overlay_release"] = "overlay_release"
    overlay_id: str
    target: str = Field(description="Agent pool the release is for.")
    seq: int = Field(
        ge=1, description="Monotonic per target; clients reject seq <= high-water mark."
    )
    key_id: str
    issued_at: datetime
    expires_at: datetime
    patch_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    patch: Patch
    rollout_fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    parent_overlay_id: str | None = None


class ControlKind(StrEnum):
    ROLLBACK = "rollback"
    PIN = "pin"
    PAUSE = "pause"
    RESUME = "resume"
    #: An operator moves the daemon's ingest past a record it cannot get past (a batch its
    #: Kafka client cannot decode). Targets `ingest:<consumer group>`; agents ignore it.
    SKIP_OFFSET = "skip_offset"
    #: An operator sets the daemon's read position of a partition whose log the broker reset
    #: under it (a topic recreated, a broker restored from a backup): back or forward, to the
    #: log's start or end. Targets `ingest:<consumer group>`; agents ignore it.
    RESET_OFFSET = "reset_offset"


#: The target prefix of commands for the daemon's ingest rather than an agent pool.
INGEST_TARGET_PREFIX = "ingest:"


class ControlCommand(Message):
    kind: Literal["control_command"] = "control_command"
    command: ControlKind
    command_id: str
    target: str
    seq: int = Field(ge=1)
    key_id: str
    issued_at: datetime
    expires_at: datetime
    overlay_id: str | None = Field(
        default=None,
        description="rollback --to / pin: the overlay to run ('base' for none).",
    )
    revoke_overlay_id: str | None = Field(
        default=None,
        description=(
            "rollback: the overlay taken back. Clients running it leave it; every client "
            "refuses it from then on; clients on another overlay stay where they are."
        ),
    )
    actor: str = Field(description="Who issued it (operator name or live_guard).")
    reason: str = ""
    topic: str | None = Field(default=None, description="skip_offset/reset_offset: the topic.")
    partition: int | None = Field(
        default=None, ge=0, description="skip_offset/reset_offset: the partition."
    )
    offset: int | None = Field(
        default=None,
        ge=0,
        description="skip_offset: the next offset to read (forward only); reset_offset: the "
        "next offset to read (either way).",
    )

    @model_validator(mode="after")
    def _skip_is_complete(self) -> ControlCommand:
        skip = self.command in (ControlKind.SKIP_OFFSET, ControlKind.RESET_OFFSET)
        fields = (self.topic, self.partition, self.offset)
        if skip and (None in fields or not self.target.startswith(INGEST_TARGET_PREFIX)):
            raise ValueError(
                f"{self.command.value} needs topic, partition and offset, and a target "
                f"'{INGEST_TARGET_PREFIX}<consumer group>'"
            )
        if not skip and fields != (None, None, None):
            raise ValueError("topic, partition and offset belong to skip_offset/reset_offset")
        return self


class SignedEnvelope(Message):
    """What travels on the release and control topics."""

    key_id: str
    payload_b64: str = Field(description="base64 of the exact payload bytes that were signed.")
    signature_b64: str = Field(description="Ed25519 signature of the payload bytes, base64.")
