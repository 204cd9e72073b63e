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


def refusal(data: bytes, keyring: Keyring, now: datetime = NOW) -> tuple[Rejection, str]:
    with pytest.raises(VerificationError) as caught:
        open_envelope(data, keyring, now=now)
    err = caught.value
    assert str(err) == f"{err.reason.value}: {err.detail}"
    return err.reason, err.detail


def envelope_of(raw: bytes, signer: Signer, key_id: str = "k1") -> bytes:
    """Sign arbitrary payload bytes (the signature is good; what they say is the test)."""
    return SignedEnvelope(
        key_id=key_id,
        payload_b64=base64.b64encode(raw).decode(),
        signature_b64=base64.b64encode(signer.sign(raw)).decode(),
    ).to_json_bytes()


def test_every_refusal_names_its_reason_and_what_was_wrong(signer: Signer) -> None:
    """Issue 21: the reason is the counter's label, the detail is what an operator reads in
    the log to see which message was refused and why; both, for every refusal path."""
    keyring = Keyring.of([signer, Signer("k2", signer.private_key)])
    good = seal(release(signer), signer).to_json_bytes()
    envelope = json.loads(good)
    payload = json.loads(base64.b64decode(envelope["payload_b64"]))
    no_version = {k: v for k, v in payload.items() if k != "schema_version"}
    stranger = Signer("k7", Ed25519PrivateKey.generate())
    expires = (NOW + timedelta(hours=1)).isoformat()
    cases: list[tuple[bytes, datetime, tuple[Rejection, str]]] = [
        (b"[1, 2]", NOW, (Rejection.MALFORMED, "envelope is not a JSON object")),
        (b"{}", NOW, (Rejection.MALFORMED, "envelope has no schema_version")),
        (
            json.dumps({**envelope, "schema_version": "2.0"}).encode(),
            NOW,
            (
                Rejection.UNSUPPORTED_VERSION,
                "envelope: schema_version '2.0' has major 2; this release reads major 1 only",
            ),
        ),
        (
            seal(release(stranger), stranger).to_json_bytes(),
            NOW,
            (Rejection.UNKNOWN_KEY, "key_id 'k7' not trusted"),
        ),
        (
            json.dumps(
                {**envelope, "signature_b64": base64.b64encode(b"x" * 64).decode()}
            ).encode(),
            NOW,
            (Rejection.BAD_SIGNATURE, "signature check failed: "),
        ),
        (
            envelope_of(b"not json", signer),
            NOW,
            (
                Rejection.MALFORMED,
                "signed payload is not JSON: Expecting value: line 1 column 1 (char 0)",
            ),
        ),
        (
            envelope_of(b'"text"', signer),
            NOW,
            (Rejection.MALFORMED, "signed payload is not a JSON object"),
        ),
        (
            envelope_of(json.dumps(no_version).encode(), signer),
            NOW,
            (Rejection.MALFORMED, "signed payload has no schema_version"),
        ),
        (
            envelope_of(json.dumps({**payload, "schema_version": "x"}).encode(), signer),
            NOW,
            (
                Rejection.UNSUPPORTED_VERSION,
                "signed payload: schema_version 'x' is not of the form MAJOR.MINOR",
            ),
        ),
        (
            envelope_of(json.dumps({**payload, "kind": "reward"}).encode(), signer),
            NOW,
            (Rejection.MALFORMED, "signed payload of unknown kind 'reward'"),
        ),
        (
            envelope_of(json.dumps({"schema_version": "1.0"}).encode(), signer),
            NOW,
            (Rejection.MALFORMED, "signed payload of unknown kind None"),
        ),
        (
            json.dumps({**envelope, "key_id": "k2"}).encode(),
            NOW,
            (Rejection.KEY_MISMATCH, "payload names key 'k1', envelope 'k2'"),
        ),
        (good, NOW + timedelta(hours=1), (Rejection.EXPIRED, f"expired at {expires}")),
        (
            good,
            NOW - timedelta(seconds=31),
            (Rejection.NOT_YET_VALID, f"issued_at {NOW.isoformat()} is in the future"),
        ),
        (
            seal(release(signer, patch_sha256="0" * 64), signer).to_json_bytes(),
            NOW,
            (Rejection.BAD_HASH, f"patch sha256 {PATCH.sha256()} != declared {'0' * 64}"),
        ),
    ]
    assert [refusal(data, keyring, now) for data, now, _ in cases] == [c[2] for c in cases]


def test_a_refused_envelope_or_payload_that_fails_its_schema_says_so(signer: Signer) -> None:
    keyring = Keyring.of([signer])
    reason, detail = refusal(b'{"schema_version": "1.0"}', keyring)
    assert reason is Rejection.MALFORMED
    assert detail.startswith("not a signed envelope: 3 validation errors for SignedEnvelope")
    payload = json.loads(release(signer).to_json_bytes())
    raw = json.dumps({**payload, "seq": 0}).encode()
    reason, detail = refusal(envelope_of(raw, signer), keyring)
    assert reason is Rejection.MALFORMED
    assert detail.startswith("signed payload invalid: 1 validation error for OverlayRelease\nseq")


def test_stray_characters_in_the_base64_are_refused_not_skipped(signer: Signer) -> None:
    """The bytes verified are the bytes received: base64 with characters outside its alphabet
    (which a lenient decoder drops) is a bad signature, in the payload and in the signature."""
    keyring = Keyring.of([signer])
    envelope = json.loads(seal(release(signer), signer).to_json_bytes())
    for part in ("payload_b64", "signature_b64"):
        text = envelope[part]
        spoiled = json.dumps({**envelope, part: text[:8] + "!" + text[8:]}).encode()
        reason, detail = refusal(spoiled, keyring)
        assert (reason, detail.split(":")[0]) == (Rejection.BAD_SIGNATURE, "signature check failed")


def test_the_validity_window_edges(signer: Signer) -> None:
    """Accepted strictly before `expires_at`, and up to the clock skew before `issued_at`."""
    keyring = Keyring.of([signer])
    data = seal(release(signer), signer).to_json_bytes()
    expires = NOW + timedelta(hours=1)
    tick = timedelta(microseconds=1)
    assert open_envelope(data, keyring, now=expires - tick).seq == 1
    assert refusal(data, keyring, now=expires)[0] is Rejection.EXPIRED
    assert open_envelope(data, keyring, now=NOW - timedelta(seconds=30)).seq == 1
    assert refusal(data, keyring, now=NOW - timedelta(seconds=30) - tick)[0] is (
        Rejection.NOT_YET_VALID
    )
    wide = timedelta(minutes=5)
    assert open_envelope(data, keyring, now=NOW - wide, max_clock_skew=wide).seq == 1
    with pytest.raises(VerificationError) as caught:
        open_envelope(data, keyring, now=NOW - wide - tick, max_clock_skew=wide)
    assert caught.value.reason is Rejection.NOT_YET_VALID


def test_without_a_clock_the_window_is_checked_against_now(signer: Signer) -> None:
    keyring = Keyring.of([signer])
    now = datetime.now(UTC)
    current = release(signer, issued_at=now, expires_at=now + timedelta(minutes=5))
    assert open_envelope(seal(current, signer).to_json_bytes(), keyring) == current
    with pytest.raises(VerificationError) as caught:
        open_envelope(seal(release(signer), signer).to_json_bytes(), keyring)  # NOW is past
    assert caught.value.reason is Rejection.EXPIRED


def test_key_ids_are_1_to_64_safe_characters() -> None:
    key = Ed25519PrivateKey.generate().public_key()
    for good in ("a", "x" * 64, "ops-2026_v1.A"):
        assert Keyring({good: key}).get(good) is key
    for bad in ("", "x" * 65, "a/b", "a b", "ключ"):
        with pytest.raises(ValueError) as caught:
            Keyring({bad: key})
        assert str(caught.value) == f"key_id {bad!r} must be 1-64 chars of [A-Za-z0-9._-]"
    assert Keyring().get("k1") is None


def test_key_files_that_are_not_ed25519_keys_are_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

    other = generate_private_key(SECP256R1())
    private = tmp_path / "ec.key"
    private.write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ValueError) as caught:
        Signer.from_file(private)
    assert str(caught.value) == f"{private} is not an Ed25519 private key"
    public = tmp_path / "ec.pub"
    public.write_bytes(
        other.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(ValueError) as caught:
        Keyring.from_directory(tmp_path)
    assert str(caught.value) == f"{public} is not an Ed25519 public key"


def test_a_key_directory_without_public_keys_is_refused(tmp_path: Path) -> None:
    generate_keypair(tmp_path / "elsewhere", "k1")
    (tmp_path / "k1.key").write_bytes((tmp_path / "elsewhere" / "k1.key").read_bytes())
    with pytest.raises(ValueError) as caught:
        Keyring.from_directory(tmp_path)
    assert str(caught.value) == f"no *.pub keys in {tmp_path}; create them with `keys generate`"


def test_generated_keys_load_by_file_name_or_an_explicit_id(tmp_path: Path) -> None:
    """`keys generate` makes the directory (parents too) and names both files after the key
    id; a signer loaded from the private file verifies against the keyring of the directory."""
    directory = tmp_path / "etc" / "harness-r1" / "keys"
    private, public = generate_keypair(directory, "ops-1")
    assert (private, public) == (directory / "ops-1.key", directory / "ops-1.pub")
    assert sorted(p.name for p in directory.iterdir()) == ["ops-1.key", "ops-1.pub"]
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    keyring = Keyring.from_directory(directory)
    for signer, key_id in (
        (Signer.from_file(private), "ops-1"),
        (
            Signer.from_file(private, key_id="renamed"),
            "renamed",
        ),
    ):
        assert signer.key_id == key_id
        data = b"payload"
        keyring.get("ops-1").verify(signer.sign(data), data)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="key_id"):
        Signer.from_file(private, key_id="no/slashes")


def test_generate_never_overwrites_either_half(tmp_path: Path) -> None:
    for existing in ("k1.key", "k1.pub"):
        directory = tmp_path / existing.replace(".", "-")
        directory.mkdir()
        (directory / existing).write_bytes(b"keep me")
        with pytest.raises(FileExistsError) as caught:
            generate_keypair(directory, "k1")
        assert str(caught.value) == (
            f"{directory / existing} exists; pick another key id (rotation keeps both)"
        )
        assert [p.name for p in directory.iterdir()] == [existing]
        assert (directory / existing).read_bytes() == b"keep me"
