"""The envelope every message shares: a frozen pydantic model with a checked schema_version.

Why: the daemon consumes messages written by other processes and other releases. A message
whose major version we do not know must be refused with a clear error (and later routed to a
dead-letter topic), never half-understood.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

SCHEMA_VERSION = "1.0"
SUPPORTED_MAJOR = 1


class UnsupportedSchemaVersion(ValueError):
    """Raised for a message whose schema_version has a major version we do not read."""


def check_schema_version(version: str) -> str:
    """Accept `MAJOR.MINOR` with the supported major; minor additions are read leniently."""
    major_text, _, minor_text = version.partition(".")
    if not major_text.isdigit() or (minor_text and not minor_text.isdigit()):
        raise UnsupportedSchemaVersion(f"schema_version {version!r} is not of the form MAJOR.MINOR")
    if int(major_text) != SUPPORTED_MAJOR:
        raise UnsupportedSchemaVersion(
            f"schema_version {version!r} has major {major_text}; this release reads "
            f"major {SUPPORTED_MAJOR} only"
        )
    return version


class Contract(BaseModel):
    """Base of nested contract parts: immutable and strict about unknown fields, and finite
    numbers only: a NaN or an Infinity (which Python's and pydantic's JSON readers accept) has
    no meaning in any message and cannot be stored (a NaN reward failed the store's NOT NULL
    column after validation had passed it)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Message(Contract):
    """Base of every top-level message: carries and checks `schema_version`."""

    schema_version: str = SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _known_major(cls, value: str) -> str:
        return check_schema_version(value)

    def to_json_bytes(self) -> bytes:
        """Canonical bytes: what goes on the wire and into hashes."""
        return self.model_dump_json().encode("utf-8")

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> Any:
        return cls.model_validate_json(data)
