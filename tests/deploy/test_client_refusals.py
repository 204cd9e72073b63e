"""What the agent-side overlay client refuses, with no state change: forged, unknown-key,
wrong-target, replayed, expired, tampered and malformed releases, replayed control commands, a
message on the other kind's topic, a release outside the configured clock skew; and the warning
each refusal logs."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from deploy_rig import Rig, make_patch, signed_release

from harness_r1.contracts import ControlKind
from harness_r1.deploy.client import (
    CONTROL_TOPIC,
    RELEASE_TOPIC,
    ClientConfig,
    ClientMetrics,
    OverlayClient,
)
from harness_r1.deploy.signing import Signer, VerificationError, open_envelope
from harness_r1.deploy.state import Hold


def snapshot(client):  # type: ignore[no-untyped-def]
    s = client.state
    return (client.active_overlay_id, s.release_hwm, s.control_hwm, tuple(s.revoked), s.hold)


def test_every_attack_is_refused_with_no_state_change(
    rig: Rig, client_metrics: ClientMetrics
) -> None:
    client = rig.client(metrics=client_metrics)
    good = rig.overlay("good")
    rig.publisher.release(good, actor="alice", reason="r")
    client.sync()
    before = snapshot(client)
    evil = rig.overlay("evil")
    forger = Signer("k1", Ed25519PrivateKey.generate())
    stranger = Signer("k9", Ed25519PrivateKey.generate())
    replayed = rig.bus.log[0].value
    genuine = json.loads(signed_release(rig.registry, rig.signer, evil, 50))
    payload = base64.b64decode(genuine["payload_b64"]).replace(b"'evil'", b"'EVIL'")
    genuine["payload_b64"] = base64.b64encode(payload).decode()
    tampered = json.dumps(genuine).encode()
    other_pool = rig.overlay("other", target="pool-b")
    attacks = {
        "bad_signature": signed_release(rig.registry, forger, evil, 51),
        "unknown_key": signed_release(rig.registry, stranger, evil, 52),
        "wrong_target": signed_release(rig.registry, rig.signer, other_pool, 53),
        "replay": replayed,
        "expired": signed_release(
            rig.registry,
            rig.signer,
            evil,
            54,
            issued_at=datetime.now(UTC) - timedelta(hours=2),
            expires_at=datetime.now(UTC) - timedelta(hours=1),
        ),
        "bad_hash": signed_release(rig.registry, rig.signer, evil, 55, patch=make_patch("swapped")),
        "malformed": b'{"not": "an envelope"}',
    }
    attacks["bad_signature_tampered"] = tampered
    for name, data in attacks.items():
        assert not client.handle(RELEASE_TOPIC, data), name
        assert snapshot(client) == before, name
    expected = {k.removesuffix("_tampered") for k in attacks}
    assert set(client.rejections) == expected
    assert client.rejections["bad_signature"] == 2
    total = sum(
        client_metrics.rejections.labels(reason=r)._value.get()  # noqa: SLF001
        for r in expected
    )
    assert total == len(attacks)


def test_replayed_control_command_is_refused(rig: Rig, client: OverlayClient) -> None:
    a = rig.overlay("a")
    rig.publisher.release(a, actor="alice", reason="r")
    rig.publisher.control(ControlKind.PAUSE, "pool-a", actor="alice", reason="freeze")
    client.sync()
    assert client.state.hold is Hold.PAUSED
    pause = rig.bus.log[-1].value
    rig.publisher.control(ControlKind.RESUME, "pool-a", actor="alice", reason="go")
    client.sync()
    assert not client.handle(CONTROL_TOPIC, pause)
    assert client.state.hold is Hold.NONE and client.rejections == {"replay": 1}


def test_a_release_on_the_control_topic_or_a_command_on_the_release_topic_is_malformed(
    rig: Rig, client_metrics: ClientMetrics
) -> None:
    """Issue 21: each topic carries one kind. A validly signed message of the other kind is
    refused as malformed with no state change (its seq would be checked against the other
    stream's high-water mark), counted, and the same bytes on their own topic still apply."""
    client = rig.client(metrics=client_metrics)
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    rig.publisher.control(ControlKind.PAUSE, "pool-a", actor="o", reason="freeze")
    release, pause = (record.value for record in rig.bus.log)
    before = snapshot(client)
    assert not client.handle(RELEASE_TOPIC, pause)
    assert snapshot(client) == before
    assert not client.handle(CONTROL_TOPIC, release)
    assert snapshot(client) == before
    assert client.rejections == {"malformed": 2}
    metric = client_metrics.rejections.labels(reason="malformed")._value.get()  # noqa: SLF001
    assert metric == 2
    for kind in ("release", "control"):
        counted = client_metrics.messages.labels(kind=kind, result="rejected")._value.get()  # noqa: SLF001
        assert counted == 1, kind
    assert client.sync() == 2  # the same bytes, each on its own topic
    assert client.active_overlay_id == a and client.state.hold is Hold.PAUSED


def test_the_clock_skew_allowed_is_the_configured_one(rig: Rig) -> None:
    """A release issued 20 s ahead of the agent's clock passes the default 30 s of skew and is
    refused as not yet valid by a client configured for 5 s."""
    a = rig.overlay("a")
    ahead = datetime.now(UTC) + timedelta(seconds=20)
    data = signed_release(rig.registry, rig.signer, a, 1, issued_at=ahead)
    assert rig.client("lenient").handle(RELEASE_TOPIC, data)
    config = ClientConfig(
        agent_id="strict", target="pool-a", state_dir=rig.tmp / "strict", max_clock_skew_s=5
    )
    strict = OverlayClient(config, rig.keyring, rig.hooks_factory)
    assert not strict.handle(RELEASE_TOPIC, data)
    assert strict.rejections == {"not_yet_valid": 1}
    clock = OverlayClient(
        ClientConfig(agent_id="late", target="pool-a", state_dir=rig.tmp / "late"),
        rig.keyring,
        rig.hooks_factory,
        now=lambda: datetime.now(UTC) + timedelta(hours=1),
    )
    assert not clock.handle(RELEASE_TOPIC, data)
    assert clock.rejections == {"expired": 1}


def test_a_refused_message_is_logged_with_its_reason_and_a_bounded_detail(
    rig: Rig, client: OverlayClient
) -> None:
    """Issue 21: the warning an operator searches for names the agent, the stream, the reason
    and the first 300 characters of the detail (a schema error can run to kilobytes)."""
    data = b'{"schema_version": "1.0", "key_id": 1, "payload_b64": [], "signature_b64": {}}'
    with pytest.raises(VerificationError) as caught:
        open_envelope(data, rig.keyring)
    detail = caught.value.detail
    assert len(detail) > 300
    with structlog.testing.capture_logs() as logs:
        assert not client.handle(CONTROL_TOPIC, data)
    assert logs == [
        {
            "event": "overlay_message_rejected",
            "agent_id": "agent-0",
            "kind": "control",
            "reason": "malformed",
            "detail": detail[:300],
            "log_level": "warning",
        }
    ]
    elsewhere = signed_release(rig.registry, rig.signer, rig.overlay("b", target="pool-b"), 1)
    with structlog.testing.capture_logs() as logs:
        assert not client.handle(RELEASE_TOPIC, elsewhere)
    assert [(e["reason"], e["detail"]) for e in logs] == [
        ("wrong_target", "for target 'pool-b', this agent serves 'pool-a'")
    ]
