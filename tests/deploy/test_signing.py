"""Ed25519 envelopes: what is accepted, and every way a message is refused."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness_r1.contracts import (
    ControlCommand,
    ControlKind,
    HookCode,
    HookName,
    OverlayRelease,
    Patch,
    SignedEnvelope,
)
from harness_r1.deploy.signing import (
    Keyring,
    Rejection,
    Signer,
    VerificationError,
    generate_keypair,
    open_envelope,
    seal,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PATCH = Patch(
    env="dbbench",
    description="noop",
    hooks=[HookCode(hook=HookName.PRE_ACTION, code="def hook(ctx, state):\n    return None\n")],
)


def release(signer: Signer, **changes: object) -> OverlayRelease:
    fields: dict[str, object] = {
        "overlay_id": "ov-1",
        "target": "pool-a",
        "seq": 1,
        "key_id": signer.key_id,
        "issued_at": NOW,
        "expires_at": NOW + timedelta(hours=1),
        "patch_sha256": PATCH.sha256(),
        "patch": PATCH,
    }
    fields.update(changes)
    return OverlayRelease.model_validate(fields)


def command(signer: Signer) -> ControlCommand:
    return ControlCommand(
        command=ControlKind.ROLLBACK,
        command_id="c1",
        target="pool-a",
        seq=1,
        key_id=signer.key_id,
        issued_at=NOW,
        expires_at=NOW + timedelta(minutes=5),
        actor="alice",
        reason="test",
    )


@pytest.fixture
def signer() -> Signer:
    return Signer("k1", Ed25519PrivateKey.generate())


def rejection(data: bytes, keyring: Keyring, now: datetime = NOW) -> Rejection:
    with pytest.raises(VerificationError) as caught:
        open_envelope(data, keyring, now=now)
    return caught.value.reason


def test_round_trip_release_and_command(signer: Signer) -> None:
    keyring = Keyring.of([signer])
    for payload in (release(signer), command(signer)):
        data = seal(payload, signer).to_json_bytes()
        assert open_envelope(data, keyring, now=NOW) == payload


def test_forged_signature_is_refused(signer: Signer) -> None:
    forger = Signer("k1", Ed25519PrivateKey.generate())  # same key id, other key
    data = seal(release(forger), forger).to_json_bytes()
    assert rejection(data, Keyring.of([signer])) is Rejection.BAD_SIGNATURE


def test_unknown_key_is_refused(signer: Signer) -> None:
    other = Signer("k2", Ed25519PrivateKey.generate())
    data = seal(release(other), other).to_json_bytes()
    assert rejection(data, Keyring.of([signer])) is Rejection.UNKNOWN_KEY


def test_tampered_payload_bytes_are_refused(signer: Signer) -> None:
    envelope = seal(release(signer), signer)
    payload = base64.b64decode(envelope.payload_b64).replace(b"return None", b"return 'x' ")
    tampered = envelope.model_copy(update={"payload_b64": base64.b64encode(payload).decode()})
    assert rejection(tampered.to_json_bytes(), Keyring.of([signer])) is Rejection.BAD_SIGNATURE


def test_patch_not_matching_its_declared_hash_is_refused(signer: Signer) -> None:
    """Signed by a trusted key, yet the patch is not the one the hash names."""
    data = seal(release(signer, patch_sha256="0" * 64), signer).to_json_bytes()
    assert rejection(data, Keyring.of([signer])) is Rejection.BAD_HASH


def test_expired_and_future_messages_are_refused(signer: Signer) -> None:
    keyring = Keyring.of([signer])
    data = seal(release(signer), signer).to_json_bytes()
    assert rejection(data, keyring, now=NOW + timedelta(hours=2)) is Rejection.EXPIRED
    assert rejection(data, keyring, now=NOW - timedelta(minutes=5)) is Rejection.NOT_YET_VALID
    assert open_envelope(data, keyring, now=NOW + timedelta(hours=2), check_validity=False)


def test_key_id_swapped_in_envelope_is_refused(signer: Signer) -> None:
    """The payload names the key that signed it; an envelope claiming another key fails."""
    second = Signer("k2", signer.private_key)
    envelope = seal(release(signer), signer).model_copy(update={"key_id": "k2"})
    assert rejection(envelope.to_json_bytes(), Keyring.of([signer, second])) is (
        Rejection.KEY_MISMATCH
    )


def test_garbage_and_unknown_versions(signer: Signer) -> None:
    keyring = Keyring.of([signer])
    assert rejection(b"\xff not json", keyring) is Rejection.MALFORMED
    assert rejection(b"[1, 2]", keyring) is Rejection.MALFORMED
    envelope = json.loads(seal(release(signer), signer).to_json_bytes())
    envelope["schema_version"] = "2.0"
    assert rejection(json.dumps(envelope).encode(), keyring) is Rejection.UNSUPPORTED_VERSION
    payload = json.loads(base64.b64decode(envelope["payload_b64"]))
    payload["schema_version"] = "9.1"
    raw = json.dumps(payload).encode()
    inner = SignedEnvelope(
        key_id="k1",
        payload_b64=base64.b64encode(raw).decode(),
        signature_b64=base64.b64encode(signer.sign(raw)).decode(),
    )
    assert rejection(inner.to_json_bytes(), keyring) is Rejection.UNSUPPORTED_VERSION


def test_keys_generate_and_load(tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path, "ops-2026")
    assert private.stat().st_mode & 0o777 == 0o600
    signer = Signer.from_file(private)
    assert signer.key_id == "ops-2026"
    keyring = Keyring.from_directory(tmp_path)
    data = seal(command(signer), signer).to_json_bytes()
    assert open_envelope(data, keyring, now=NOW).key_id == "ops-2026"
    with pytest.raises(FileExistsError):
        generate_keypair(tmp_path, "ops-2026")
    with pytest.raises(ValueError, match="key_id"):
        generate_keypair(tmp_path, "../evil")


def test_seal_refuses_a_payload_naming_another_key(signer: Signer) -> None:
    with pytest.raises(ValueError, match="names key"):
        seal(release(signer, key_id="k9"), signer)
