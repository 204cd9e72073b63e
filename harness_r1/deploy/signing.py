"""Ed25519 signing of overlay releases and control commands, and their verification.

Why the envelope carries the payload as base64 bytes: the signature is checked over the exact
bytes received, and the payload is parsed from those same bytes, so no JSON re-serialisation
can make a verified message differ from the one that was signed.

Verification here is stateless (key, signature, schema, key binding, validity window, patch
hash). What needs state (target, seq high-water mark) is the agent-side client's job.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import ValidationError

from harness_r1.contracts import (
    ControlCommand,
    OverlayRelease,
    SignedEnvelope,
    UnsupportedSchemaVersion,
    check_schema_version,
)

SignedPayload = OverlayRelease | ControlCommand
KEY_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class Rejection(StrEnum):
    """Why a signed message was refused; the label of the rejection counter."""

    MALFORMED = "malformed"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    KEY_MISMATCH = "key_mismatch"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    BAD_HASH = "bad_hash"
    WRONG_TARGET = "wrong_target"
    REPLAY = "replay"


class VerificationError(Exception):
    """A refused message: `reason` is stable (metrics, tests), `detail` is for the log."""

    def __init__(self, reason: Rejection, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


def _check_key_id(key_id: str) -> str:
    if not key_id or len(key_id) > 64 or not set(key_id) <= KEY_ID_CHARS:
        raise ValueError(f"key_id {key_id!r} must be 1-64 chars of [A-Za-z0-9._-]")
    return key_id


@dataclass(frozen=True)
class Signer:
    """A private key and the id verifiers know its public half by."""

    key_id: str
    private_key: Ed25519PrivateKey

    @classmethod
    def from_file(cls, path: Path, key_id: str | None = None) -> Signer:
        """Load a PEM (PKCS8) private key; the key id defaults to the file's stem."""
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path} is not an Ed25519 private key")
        return cls(_check_key_id(key_id or path.stem), key)

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)


class Keyring:
    """Public keys by key id. Rotation: add the new key, sign with it, then move the old one's
    `.pub` into `retired/`: a retired key verifies only what an agent already accepted (its
    stored overlay, re-read at restart), never a new message; an overlay signed with it keeps
    running across restarts until a release signed with the new key replaces it (the daemon
    re-announces what is live). Deleting the old key instead sends such agents to base."""

    def __init__(
        self,
        keys: Mapping[str, Ed25519PublicKey] | None = None,
        retired: Mapping[str, Ed25519PublicKey] | None = None,
    ) -> None:
        self._keys = {_check_key_id(k): v for k, v in (keys or {}).items()}
        self._retired = {_check_key_id(k): v for k, v in (retired or {}).items()}

    @classmethod
    def from_directory(cls, directory: Path) -> Keyring:
        """Every `<key_id>.pub` (PEM) in DIRECTORY, and the retired ones in DIRECTORY/retired."""
        keys = _load_public_keys(directory)
        if not keys:
            raise ValueError(f"no *.pub keys in {directory}; create them with `keys generate`")
        return cls(keys, _load_public_keys(directory / "retired"))

    @classmethod
    def of(cls, signers: Iterable[Signer], retired: Iterable[Signer] = ()) -> Keyring:
        return cls(
            {s.key_id: s.private_key.public_key() for s in signers},
            {s.key_id: s.private_key.public_key() for s in retired},
        )

    def get(self, key_id: str, *, retired_ok: bool = False) -> Ed25519PublicKey | None:
        key = self._keys.get(key_id)
        if key is None and retired_ok:
            key = self._retired.get(key_id)
        return key


def _load_public_keys(directory: Path) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    if not directory.is_dir():
        return keys
    for path in sorted(directory.glob("*.pub")):
        key = serialization.load_pem_public_key(path.read_bytes())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{path} is not an Ed25519 public key")
        keys[path.stem] = key
    return keys


def generate_keypair(directory: Path, key_id: str) -> tuple[Path, Path]:
    """Write `<key_id>.key` (PEM PKCS8, mode 0600) and `<key_id>.pub` (PEM); never overwrite."""
    _check_key_id(key_id)
    directory.mkdir(parents=True, exist_ok=True)
    private_path, public_path = directory / f"{key_id}.key", directory / f"{key_id}.pub"
    for path in (private_path, public_path):
        if path.exists():
            raise FileExistsError(f"{path} exists; pick another key id (rotation keeps both)")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private_pem)
    public_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private_path, public_path


def seal(payload: SignedPayload, signer: Signer) -> SignedEnvelope:
    """Sign the payload's canonical bytes. The payload must name the signer's key id."""
    if payload.key_id != signer.key_id:
        raise ValueError(f"payload names key {payload.key_id!r}, signer is {signer.key_id!r}")
    data = payload.to_json_bytes()
    return SignedEnvelope(
        key_id=signer.key_id,
        payload_b64=base64.b64encode(data).decode("ascii"),
        signature_b64=base64.b64encode(signer.sign(data)).decode("ascii"),
    )


def open_envelope(
    data: bytes,
    keyring: Keyring,
    *,
    now: datetime | None = None,
    max_clock_skew: timedelta = timedelta(seconds=30),
    check_validity: bool = True,
    accepted_before: bool = False,
) -> SignedPayload:
    """Verify an envelope as received and return its payload, or raise VerificationError.

    Order matters: nothing in the payload is trusted (not even parsed) before the signature
    over its bytes has been checked with a key we know. `check_validity=False` is for
    re-reading an overlay this client already accepted (a stored release may be past its
    acceptance window and still be the overlay in force); `accepted_before=True` also lets a
    retired key verify it (the keyring's rotation rule)."""
    envelope = _parse_envelope(data)
    key = keyring.get(envelope.key_id, retired_ok=accepted_before)
    if key is None:
        raise VerificationError(Rejection.UNKNOWN_KEY, f"key_id {envelope.key_id!r} not trusted")
    try:
        payload_bytes = base64.b64decode(envelope.payload_b64, validate=True)
        key.verify(base64.b64decode(envelope.signature_b64, validate=True), payload_bytes)
    except (InvalidSignature, binascii.Error, ValueError) as err:
        raise VerificationError(Rejection.BAD_SIGNATURE, f"signature check failed: {err}") from err
    payload = _parse_payload(payload_bytes)
    if payload.key_id != envelope.key_id:
        raise VerificationError(
            Rejection.KEY_MISMATCH,
            f"payload names key {payload.key_id!r}, envelope {envelope.key_id!r}",
        )
    if check_validity:
        _check_window(payload, now or datetime.now(UTC), max_clock_skew)
    if isinstance(payload, OverlayRelease):
        actual = payload.patch.sha256()
        if actual != payload.patch_sha256:
            raise VerificationError(
                Rejection.BAD_HASH, f"patch sha256 {actual} != declared {payload.patch_sha256}"
            )
    return payload


def _parse_envelope(data: bytes) -> SignedEnvelope:
    _check_version(data, "envelope")
    try:
        envelope: SignedEnvelope = SignedEnvelope.from_json_bytes(data)
    except (ValidationError, ValueError) as err:
        raise VerificationError(Rejection.MALFORMED, f"not a signed envelope: {err}") from err
    return envelope


def _parse_payload(payload_bytes: bytes) -> SignedPayload:
    kind = _check_version(payload_bytes, "signed payload").get("kind")
    models: dict[object, type[OverlayRelease] | type[ControlCommand]] = {
        "overlay_release": OverlayRelease,
        "control_command": ControlCommand,
    }
    model = models.get(kind)
    if model is None:
        raise VerificationError(Rejection.MALFORMED, f"signed payload of unknown kind {kind!r}")
    try:
        parsed: SignedPayload = model.from_json_bytes(payload_bytes)
    except (ValidationError, ValueError) as err:
        raise VerificationError(Rejection.MALFORMED, f"signed payload invalid: {err}") from err
    return parsed


def _check_version(data: bytes, what: str) -> dict[str, object]:
    """Read the raw object and refuse an unknown major version with its own reason."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VerificationError(Rejection.MALFORMED, f"{what} is not JSON: {err}") from err
    if not isinstance(raw, dict):
        raise VerificationError(Rejection.MALFORMED, f"{what} is not a JSON object")
    if "schema_version" not in raw:
        raise VerificationError(Rejection.MALFORMED, f"{what} has no schema_version")
    try:
        check_schema_version(str(raw["schema_version"]))
    except UnsupportedSchemaVersion as err:
        raise VerificationError(Rejection.UNSUPPORTED_VERSION, f"{what}: {err}") from err
    return raw


def _check_window(payload: SignedPayload, now: datetime, skew: timedelta) -> None:
    if payload.expires_at <= now:
        raise VerificationError(Rejection.EXPIRED, f"expired at {payload.expires_at.isoformat()}")
    if payload.issued_at > now + skew:
        raise VerificationError(
            Rejection.NOT_YET_VALID, f"issued_at {payload.issued_at.isoformat()} is in the future"
        )
