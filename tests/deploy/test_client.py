"""The agent-side overlay client's rules, on an in-memory log (the broker is in test_fleet.py):
what it accepts, what it refuses with no state change, when it swaps, and what survives a
restart."""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from deploy_rig import ListSource, Rig, TaggedHooks, make_patch
from deploy_rig import signed_release as release_bytes

from harness_r1.consumers.kafka import Record
from harness_r1.contracts import ControlCommand, ControlKind, Patch
from harness_r1.deploy.client import (
    CONTROL_TOPIC,
    RELEASE_TOPIC,
    ClientConfig,
    ClientMetrics,
    OverlayClient,
)
from harness_r1.deploy.registry import OverlayState
from harness_r1.deploy.signing import Keyring, Signer, VerificationError, open_envelope, seal
from harness_r1.deploy.state import STATE_FILE, ClientState, Hold, StateStore
from harness_r1.harness.hooks import HookSet, NoHooks


def snapshot(client):  # type: ignore[no-untyped-def]
    s = client.state
    return (client.active_overlay_id, s.release_hwm, s.control_hwm, tuple(s.revoked), s.hold)


def signed_release(rig: Rig, signer: Signer, overlay_id: str, seq: int, **changes: object) -> bytes:
    return release_bytes(rig.registry, signer, overlay_id, seq, **changes)


def test_release_activates_and_lease_stamps_the_overlay(rig: Rig) -> None:
    client = rig.client()
    assert client.active_overlay_id == "base"
    ov = rig.overlay("a")
    rig.publisher.release(ov, actor="alice", reason="canary won")
    assert client.sync() == 1
    with client.lease() as lease:
        assert lease.overlay_id == ov == lease.hooks.overlay_id
    assert rig.registry.get(ov).state is OverlayState.ACTIVE


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
    genuine = json.loads(signed_release(rig, rig.signer, evil, 50))
    payload = base64.b64decode(genuine["payload_b64"]).replace(b"'evil'", b"'EVIL'")
    genuine["payload_b64"] = base64.b64encode(payload).decode()
    tampered = json.dumps(genuine).encode()
    other_pool = rig.overlay("other", target="pool-b")
    attacks = {
        "bad_signature": signed_release(rig, forger, evil, 51),
        "unknown_key": signed_release(rig, stranger, evil, 52),
        "wrong_target": signed_release(rig, rig.signer, other_pool, 53),
        "replay": replayed,
        "expired": signed_release(
            rig,
            rig.signer,
            evil,
            54,
            issued_at=datetime.now(UTC) - timedelta(hours=2),
            expires_at=datetime.now(UTC) - timedelta(hours=1),
        ),
        "bad_hash": signed_release(rig, rig.signer, evil, 55, patch=make_patch("swapped")),
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


def test_replayed_control_command_is_refused(rig: Rig) -> None:
    client = rig.client()
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


def test_swap_waits_for_the_episode_boundary(rig: Rig) -> None:
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    with client.lease() as running:
        rig.publisher.release(b, actor="x", reason="r")
        client.sync()
        assert client.active_overlay_id == b
        assert running.overlay_id == a and not running.hooks.closed  # type: ignore[attr-defined]
        with client.lease() as next_episode:
            assert next_episode.overlay_id == b
    assert running.hooks.closed  # type: ignore[attr-defined]


def test_rollback_returns_to_previous_and_refuses_a_late_release(rig: Rig) -> None:
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b", parent=None)
    rig.publisher.release(a, actor="x", reason="r")
    rig.publisher.release(b, actor="x", reason="r")
    client.sync()
    rig.publisher.control(ControlKind.ROLLBACK, "pool-a", actor="bob", reason="hurts")
    client.sync()
    assert client.active_overlay_id == a
    assert rig.registry.get(b).state is OverlayState.ROLLED_BACK
    assert rig.registry.get(a).state is OverlayState.ACTIVE
    events = rig.registry.events(b)
    assert events[-1].actor == "bob" and events[-1].reason == "hurts"
    # a late (re-sent) release of b is accepted as a message but never applied
    with structlog.testing.capture_logs() as logs:
        assert client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, b, 99))
    assert client.active_overlay_id == a
    assert logs == [
        {"event": "overlay_release_ignored_revoked", "overlay_id": b, "log_level": "info"}
    ]


def test_rollback_to_named_and_to_base(rig: Rig) -> None:
    client = rig.client()
    a, b, c = rig.overlay("a"), rig.overlay("b"), rig.overlay("c")
    for ov in (a, b, c):
        rig.publisher.release(ov, actor="x", reason="r")
    client.sync()
    rig.publisher.control(ControlKind.ROLLBACK, "pool-a", overlay_id=a, actor="o", reason="r")
    client.sync()
    assert client.active_overlay_id == a and c in client.state.revoked
    rig.publisher.control(ControlKind.ROLLBACK, "pool-a", overlay_id="base", actor="o", reason="r")
    client.sync()
    assert client.active_overlay_id == "base"
    with client.lease() as lease:  # base means the base harness: no hooks, not none at all
        assert (lease.overlay_id, type(lease.hooks)) == ("base", NoHooks)


def test_rollback_of_an_overlay_leaves_control_agents_alone(rig: Rig) -> None:
    """The live guard's rollback of a canary must not move agents kept on the parent."""
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    b = rig.overlay("b", parent=a)
    rig.publisher.release(b, fraction=0.5, actor="x", reason="canary")
    clients = [rig.client(f"agent-{i}") for i in range(20)]
    for c in clients:
        c.sync()
    on_b = [c for c in clients if c.active_overlay_id == b]
    assert 0 < len(on_b) < 20
    rig.publisher.control(
        ControlKind.ROLLBACK, "pool-a", revoke_overlay_id=b, actor="live_guard", reason="x"
    )
    for c in clients:
        c.sync()
    assert {c.active_overlay_id for c in clients} == {a}


def test_pause_pin_resume(rig: Rig) -> None:
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b")
    rig.publisher.release(a, actor="x", reason="r")
    rig.publisher.control(ControlKind.PAUSE, "pool-a", actor="o", reason="incident")
    rig.publisher.release(b, actor="x", reason="r")
    client.sync()
    assert client.active_overlay_id == a and client.state.pending == b
    rig.publisher.control(ControlKind.RESUME, "pool-a", actor="o", reason="ok")
    client.sync()
    assert client.active_overlay_id == b
    rig.publisher.control(ControlKind.PIN, "pool-a", overlay_id=a, actor="o", reason="known")
    c = rig.overlay("c")
    rig.publisher.release(c, actor="x", reason="r")
    client.sync()
    assert client.active_overlay_id == a and client.state.hold is Hold.PINNED


def test_restart_without_broker_keeps_last_good_overlay_and_hwm(rig: Rig) -> None:
    client = rig.client()
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    client.close()
    rig.bus.offline = True
    again = rig.client()
    assert again.active_overlay_id == a
    assert again.sync() == 0 and again.active_overlay_id == a
    rig.bus.offline = False
    assert not again.handle(RELEASE_TOPIC, rig.bus.log[0].value)  # still a replay
    assert again.rejections == {"replay": 1}


def test_tampered_state_file_falls_back_to_base(rig: Rig) -> None:
    client = rig.client()
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    client.close()
    [stored] = (rig.tmp / "agent-0" / "overlays").glob("*.envelope.json")
    stored.write_bytes(stored.read_bytes().replace(b'"signature_b64":"', b'"signature_b64":"AA'))
    with structlog.testing.capture_logs() as logs:
        restarted = rig.client()
    with restarted.lease() as lease:
        assert (lease.overlay_id, type(lease.hooks)) == ("base", NoHooks)
    assert [e for e in logs if e["event"] == "stored_overlay_invalid"] == [
        {
            "event": "stored_overlay_invalid",
            "overlay_id": a,
            "reason": "bad_signature",
            "log_level": "error",
        }
    ]


def test_widening_a_release_moves_the_rest(rig: Rig) -> None:
    a = rig.overlay("a")
    rig.publisher.release(a, fraction=0.3, actor="x", reason="canary")
    clients = [rig.client(f"agent-{i}") for i in range(20)]
    for c in clients:
        c.sync()
    assert rig.registry.get(a).state is OverlayState.CANARY
    assert 0 < sum(c.active_overlay_id == a for c in clients) < 20
    rig.publisher.release(a, fraction=0.6, actor="operator", reason="widen")
    # the registry keeps the widened fraction (re-announcements publish it) and says who
    assert rig.registry.get(a).evidence["rollout_fraction"] == 0.6
    assert rig.registry.events(a)[-1].actor == "operator"
    rig.publisher.release(a, fraction=0.6, actor="daemon", reason="announce")
    assert rig.registry.events(a)[-1].actor == "operator"  # same fraction: no new event
    rig.publisher.release(a, fraction=1.0, actor="live_guard", reason="better")
    for c in clients:
        c.sync()
    assert all(c.active_overlay_id == a for c in clients)
    assert rig.registry.get(a).state is OverlayState.ACTIVE


def test_taken_back_overlays_cannot_be_released_again_only_pinned(rig: Rig) -> None:
    from harness_r1.deploy.registry import InvalidTransition

    a, b = rig.overlay("a"), rig.overlay("b")
    rig.publisher.release(a, actor="x", reason="r")
    rig.publisher.release(b, actor="x", reason="r")
    rig.publisher.control(ControlKind.ROLLBACK, "pool-a", actor="o", reason="bad")
    with pytest.raises(InvalidTransition, match="pin"):
        rig.publisher.release(b, actor="x", reason="again")
    with pytest.raises(ValueError, match="itself"):
        rig.publisher.control(
            ControlKind.ROLLBACK, "pool-a", overlay_id=a, revoke_overlay_id=a, actor="o", reason=""
        )
    rig.publisher.control(ControlKind.PIN, "pool-a", overlay_id="base", actor="o", reason="off")
    assert rig.registry.active("pool-a") is None  # the registry says what the fleet runs


def test_an_agent_back_after_a_rollback_expired_still_drops_the_overlay(rig: Rig) -> None:
    """Expiry protects against replays of what would add or change an overlay; a rollback
    that went out while the agent was down (and has expired since) must still take effect."""
    from harness_r1.deploy.publisher import Publisher

    client = rig.client()
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    late = Publisher(
        rig.registry,
        rig.signer,
        lambda topic, value, key: rig.bus.append(topic, value),
        now=lambda: two_hours_ago,
    )
    late.control(ControlKind.ROLLBACK, "pool-a", actor="live_guard", reason="live_guard: worse")
    late.control(ControlKind.PAUSE, "pool-a", actor="o", reason="old pause")
    client.sync()
    assert client.active_overlay_id == "base"
    assert client.state.hold is Hold.NONE and client.rejections == {"expired": 1}


def test_restart_does_not_apply_a_stored_release_for_another_target(rig: Rig) -> None:
    """Issue 21: the restart path re-verifies the stored envelope of the overlay in force, and
    that includes its target. A validly signed pool-b release planted in pool-a's state dir
    (a state dir copied between pools) is not applied: the client comes up on base and logs
    it."""
    other = rig.overlay("other", target="pool-b")
    rig.publisher.release(other, actor="x", reason="r")
    pool_b = rig.client("agent-b", target="pool-b")
    pool_b.sync()
    assert pool_b.active_overlay_id == other  # a genuine, accepted pool-b release
    pool_b.close()
    store = StateStore(rig.tmp / "agent-0")  # pool-a's agent-0
    [envelope] = (rig.tmp / "agent-b" / "overlays").glob("*.envelope.json")
    shutil.copy(envelope, store.overlay_dir / envelope.name)
    planted = store.load("agent-0", "pool-a")
    planted.active = other
    store.save(planted)
    assert store.load_envelope(other) == envelope.read_bytes()
    hooks_before = len(rig.hooks_made)
    with structlog.testing.capture_logs() as logs:
        client = rig.client()
    assert client.active_overlay_id == "base" and client.state.active == "base"
    with client.lease() as lease:
        assert lease.overlay_id == "base"
    assert len(rig.hooks_made) == hooks_before  # no HookSet was built for the pool-b overlay
    assert [
        (e["log_level"], e["overlay_id"], e["cause"])
        for e in logs
        if e["event"] == "overlay_unloadable_using_base"
    ] == [("warning", other, "startup")]


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


def test_client_metrics_are_the_documented_families() -> None:
    """Operators' dashboards and alerts name these families, label sets and help texts."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = ClientMetrics(registry)
    metrics.messages.labels(kind="release", result="applied").inc()
    metrics.rejections.labels(reason="malformed").inc()
    metrics.swaps.labels(cause="release").inc()
    families = {
        family.name: (family.type, family.documentation, sorted(family.samples[0].labels))
        for family in registry.collect()
    }
    assert families == {
        "harness_r1_client_messages": (
            "counter",
            "Release and control messages read by agent-side clients, by kind and result",
            ["kind", "result"],
        ),
        "harness_r1_client_rejections": (
            "counter",
            "Messages refused by agent-side clients, by reason",
            ["reason"],
        ),
        "harness_r1_client_swaps": (
            "counter",
            "Overlay swaps in agent-side clients, by cause",
            ["cause"],
        ),
    }


@dataclass
class RecordingSource(ListSource):
    """A ListSource that records when each poll came and the wait it was given, fails its
    first `failures` polls, and (like the real reader) waits out the timeout when idle."""

    failures: int = 0
    polls: list[tuple[float, int | None]] = field(default_factory=list)

    def poll(self, timeout_ms: int | None = None) -> list[Record]:
        self.polls.append((time.monotonic(), timeout_ms))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker gone")
        out = super().poll(timeout_ms)
        if not out:
            time.sleep((timeout_ms or 0) / 1000)
        return out


def client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "overlay-client"]


def test_started_client_applies_releases_in_the_background_and_outlives_a_failing_poll(
    rig: Rig,
) -> None:
    """Issue 21: `start()` runs one daemon thread (it never holds the agent's exit) named
    overlay-client, polling with the sync interval (100 ms by default) as its wait. A poll
    that raises is logged and retried a second later, not in a tight loop; `close()` stops
    the thread."""
    source = RecordingSource(rig.bus.log, failures=1)
    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    client = OverlayClient(config, rig.keyring, rig.hooks_factory, source_factory=lambda _: source)
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    with structlog.testing.capture_logs() as logs:
        client.start()
        client.start()  # a second start is a no-op
        try:
            [thread] = client_threads()
            daemon = thread.daemon
            deadline = time.monotonic() + 10
            while client.active_overlay_id != a and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            client.close()
    assert daemon
    assert client.active_overlay_id == a
    assert not thread.is_alive() and client_threads() == []
    assert [e for e in logs if e["event"] == "overlay_client_sync_failed"] == [
        {
            "event": "overlay_client_sync_failed",
            "agent_id": "agent-0",
            "log_level": "error",
            "exc_info": True,
        }
    ]
    (failed_at, _), (retried_at, _) = source.polls[:2]
    assert 1.0 <= retried_at - failed_at < 1.5
    assert {wait for _, wait in source.polls} == {100}
    polls = len(source.polls)
    time.sleep(0.3)
    assert len(source.polls) == polls  # closed: no more polls


def test_a_client_without_a_source_starts_no_thread(rig: Rig) -> None:
    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    client = OverlayClient(config, rig.keyring, rig.hooks_factory)
    client.start(interval_ms=10)
    assert client_threads() == []
    assert client.sync() == 0
    client.close()


def test_a_refused_message_is_logged_with_its_reason_and_a_bounded_detail(rig: Rig) -> None:
    """Issue 21: the warning an operator searches for names the agent, the stream, the reason
    and the first 300 characters of the detail (a schema error can run to kilobytes)."""
    client = rig.client()
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
    elsewhere = signed_release(rig, rig.signer, rig.overlay("b", target="pool-b"), 1)
    with structlog.testing.capture_logs() as logs:
        assert not client.handle(RELEASE_TOPIC, elsewhere)
    assert [(e["reason"], e["detail"]) for e in logs] == [
        ("wrong_target", "for target 'pool-b', this agent serves 'pool-a'")
    ]


def counter_totals(metrics: ClientMetrics) -> dict[tuple[str, tuple[str, ...]], float]:
    """Every `_total` sample of the client's families: (name, label values) -> value."""
    return {
        (sample.name, tuple(sample.labels.values())): sample.value
        for counter in (metrics.messages, metrics.rejections, metrics.swaps)
        for family in counter.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_an_operators_view_of_a_session_logs_counters_and_state(
    rig: Rig, client_metrics: ClientMetrics
) -> None:
    """Issue 21: one session as the operator sees it, in full: every event the client logs
    (swaps with their cause, each control command with who sent it and why, a refusal), the
    counters, and the state it persists. Releases of a, b; pause; c parked; resume applies c;
    pin with no overlay keeps c; rollback takes c back to b; a replay of a is refused."""
    client = rig.client(metrics=client_metrics)
    a, b, c = rig.overlay("a"), rig.overlay("b"), rig.overlay("c")
    rig.publisher.release(a, actor="x", reason="r")
    rig.publisher.release(b, actor="x", reason="r")
    rig.publisher.control(ControlKind.PAUSE, "pool-a", actor="o", reason="incident")
    rig.publisher.release(c, actor="x", reason="r")
    rig.publisher.control(ControlKind.RESUME, "pool-a", actor="o", reason="ok")
    rig.publisher.control(ControlKind.PIN, "pool-a", actor="o", reason="hold here")
    rig.publisher.control(ControlKind.ROLLBACK, "pool-a", actor="o", reason="bad")
    with structlog.testing.capture_logs() as logs:
        assert client.sync() == 7
        assert not client.handle(RELEASE_TOPIC, rig.bus.log[0].value)

    def swapped(overlay: str, previous: str, cause: str) -> dict[str, object]:
        return {
            "event": "overlay_swapped",
            "agent_id": "agent-0",
            "overlay_id": overlay,
            "previous": previous,
            "cause": cause,
            "log_level": "info",
        }

    def control(command: str, reason: str) -> dict[str, object]:
        return {
            "event": "overlay_control",
            "agent_id": "agent-0",
            "command": command,
            "overlay_id": None,
            "actor": "o",
            "reason": reason,
            "log_level": "info",
        }

    assert logs == [
        swapped(a, "base", "release"),
        swapped(b, a, "release"),
        control("pause", "incident"),
        control("resume", "ok"),
        swapped(c, b, "release"),
        control("pin", "hold here"),
        control("rollback", "bad"),
        swapped(b, c, "rollback"),
        {
            "event": "overlay_message_rejected",
            "agent_id": "agent-0",
            "kind": "release",
            "reason": "replay",
            "detail": "release seq 1 <= high-water mark 3",
            "log_level": "warning",
        },
    ]
    assert counter_totals(client_metrics) == {
        ("harness_r1_client_messages_total", ("release", "accepted")): 3.0,
        ("harness_r1_client_messages_total", ("control", "accepted")): 4.0,
        ("harness_r1_client_messages_total", ("release", "rejected")): 1.0,
        ("harness_r1_client_rejections_total", ("replay",)): 1.0,
        ("harness_r1_client_swaps_total", ("release",)): 3.0,
        ("harness_r1_client_swaps_total", ("rollback",)): 1.0,
    }
    assert (client.swaps, client.rejections) == (4, {"replay": 1})
    expected = ClientState(
        agent_id="agent-0",
        target="pool-a",
        release_hwm=3,
        control_hwm=4,
        positions={"log:0": 7},
        active=b,
        history=["base", a],
        revoked=[c],
        hold=Hold.PINNED,
        pending=None,
        released={a: 1.0, b: 1.0, c: 1.0},
    )
    assert client.state == expected
    assert StateStore(rig.tmp / "agent-0").load("agent-0", "pool-a") == expected
    client.close()


def signed_control(rig: Rig, command: ControlKind, seq: int, **changes: object) -> bytes:
    """The exact bytes of a control command for pool-a signed by the rig's key."""
    now = datetime.now(UTC)
    fields: dict[str, object] = {
        "command": command,
        "command_id": f"c{seq}",
        "target": "pool-a",
        "seq": seq,
        "key_id": rig.signer.key_id,
        "issued_at": now,
        "expires_at": now + timedelta(minutes=10),
        "actor": "o",
        "reason": "test",
    }
    fields.update(changes)
    return seal(ControlCommand.model_validate(fields), rig.signer).to_json_bytes()


def test_a_message_that_fails_to_apply_is_counted_and_the_rest_of_the_poll_applies(
    rig: Rig, client_metrics: ClientMetrics
) -> None:
    """Issue 21: a disk that refuses the release's envelope is one failed message, counted as
    `error` and logged with the error; the pause after it in the same poll still applies, and
    the positions are saved past both."""
    client = rig.client(metrics=client_metrics)
    overlays = rig.tmp / "agent-0" / "overlays"
    shutil.rmtree(overlays)
    overlays.write_bytes(b"not a directory")
    rig.publisher.release(rig.overlay("a"), actor="x", reason="r")
    rig.publisher.control(ControlKind.PAUSE, "pool-a", actor="o", reason="freeze")
    with structlog.testing.capture_logs() as logs:
        assert client.sync() == 2
    assert (client.active_overlay_id, client.state.hold) == ("base", Hold.PAUSED)
    assert client.rejections == {"error": 1}
    [failed] = [e for e in logs if e["event"] == "overlay_message_failed"]
    error = failed.pop("error")
    assert error.startswith("[Errno 20] Not a directory")
    assert failed == {
        "event": "overlay_message_failed",
        "agent_id": "agent-0",
        "log_level": "error",
        "exc_info": True,
    }
    assert counter_totals(client_metrics) == {
        ("harness_r1_client_rejections_total", ("error",)): 1.0,
        ("harness_r1_client_messages_total", ("control", "accepted")): 1.0,
    }
    saved = ClientState.model_validate_json((rig.tmp / "agent-0" / STATE_FILE).read_bytes())
    assert (saved.positions, saved.hold) == ({"log:0": 2}, Hold.PAUSED)


def test_an_overlay_whose_hooks_cannot_start_leaves_the_agent_on_base(rig: Rig) -> None:
    """A HookSet that fails to build is the safe side: base, logged and counted."""

    def broken(patch: Patch, overlay_id: str) -> HookSet:
        raise RuntimeError("sandbox would not start")

    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    client = OverlayClient(config, rig.keyring, broken)
    a = rig.overlay("a")
    with structlog.testing.capture_logs() as logs:
        assert client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 1))
    assert (client.active_overlay_id, client.state.active) == ("base", "base")
    assert client.state.history == []
    assert client.rejections == {"rollback_to_unknown": 1}
    with client.lease() as lease:
        assert (lease.overlay_id, type(lease.hooks)) == ("base", NoHooks)
    assert [e for e in logs if e["event"] == "overlay_load_failed"] == [
        {
            "event": "overlay_load_failed",
            "overlay_id": a,
            "error": "sandbox would not start",
            "log_level": "error",
        }
    ]


def test_rollback_to_an_overlay_never_received_means_base(rig: Rig) -> None:
    client = rig.client()
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    unknown = signed_control(rig, ControlKind.ROLLBACK, 1, overlay_id="ov-never-seen")
    assert client.handle(CONTROL_TOPIC, unknown)
    assert client.active_overlay_id == "base" and client.state.active == "base"
    assert client.state.revoked == [a]  # the overlay it ran is taken back
    assert client.rejections == {"rollback_to_unknown": 1}
    with client.lease() as lease:  # the next episode runs the base harness
        assert (lease.overlay_id, type(lease.hooks)) == ("base", NoHooks)


def test_close_stops_reading_and_closes_every_hookset_still_open(rig: Rig) -> None:
    """The overlay in force and one kept open by a running episode are both closed."""
    closed: list[str] = []

    class ClosingSource(RecordingSource):
        def close(self) -> None:
            closed.append("source")

    source = ClosingSource(rig.bus.log)
    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    client = OverlayClient(config, rig.keyring, rig.hooks_factory, source_factory=lambda _: source)
    a, b = rig.overlay("a"), rig.overlay("b")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    with client.lease() as running:
        rig.publisher.release(b, actor="x", reason="r")
        client.sync()
        client.close()
        assert closed == ["source"]
        assert [(h.overlay_id, h.closed) for h in rig.hooks_made] == [(a, True), (b, True)]
    assert running.overlay_id == a


def test_a_restarted_client_reads_on_from_where_it_stopped(rig: Rig) -> None:
    client = rig.client()
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    rig.publisher.control(ControlKind.PAUSE, "pool-a", actor="o", reason="r")
    assert client.sync() == 2
    client.close()
    again = rig.client()
    assert again.sync() == 0 and again.rejections == {}
    assert (again.active_overlay_id, again.state.hold) == (a, Hold.PAUSED)
    rig.publisher.control(ControlKind.RESUME, "pool-a", actor="o", reason="r")
    assert again.sync() == 1 and again.state.hold is Hold.NONE
    assert (again.active_overlay_id, again.rejections, again.swaps) == (a, {}, 0)


def test_history_keeps_the_last_32_overlays(rig: Rig) -> None:
    client = rig.client()
    overlays = [rig.overlay(f"o{i}") for i in range(34)]
    for seq, ov in enumerate(overlays, start=1):
        client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, ov, seq))
    assert client.active_overlay_id == overlays[-1]
    assert client.state.history == overlays[1:33]
    # no episode held the earlier ones: each HookSet was closed when the next one came
    assert [h.closed for h in rig.hooks_made] == [True] * 33 + [False]


def test_rollback_skips_overlays_taken_back_earlier(rig: Rig) -> None:
    """Releases a, b, c; b is taken back while the agent runs c (it stays on c); a rollback
    of c then goes to a, the newest earlier overlay not taken back."""
    client = rig.client()
    a, b, c = rig.overlay("a"), rig.overlay("b"), rig.overlay("c")
    for seq, ov in enumerate((a, b, c), start=1):
        client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, ov, seq))
    assert client.handle(
        CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 1, revoke_overlay_id=b)
    )
    assert client.active_overlay_id == c and client.state.revoked == [b]
    again = signed_control(rig, ControlKind.ROLLBACK, 2, revoke_overlay_id=b)
    assert client.handle(CONTROL_TOPIC, again)  # b once only; "base" is never taken back
    assert client.handle(
        CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 3, revoke_overlay_id="base")
    )
    assert client.active_overlay_id == c and client.state.revoked == [b]
    assert client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 4))
    assert client.active_overlay_id == a
    assert client.state.revoked == [b, c] and client.state.history == ["base"]
    assert client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 5))
    assert client.active_overlay_id == "base"
    assert client.state.revoked == [b, c, a] and client.state.history == []
    # on base, a rollback naming nothing takes nothing back and goes nowhere
    assert client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 6))
    assert client.active_overlay_id == "base" and client.state.revoked == [b, c, a]
    assert (client.swaps, client.rejections) == (5, {})


def test_a_rollback_drops_a_parked_release_of_what_it_takes_back(rig: Rig) -> None:
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 1))
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.PAUSE, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, b, 2))
    assert client.state.pending == b
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 2, revoke_overlay_id=b))
    assert (client.active_overlay_id, client.state.pending, client.state.revoked) == (a, None, [b])
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.RESUME, 3))
    assert (client.active_overlay_id, client.state.hold) == (a, Hold.NONE)
    assert (client.rejections, client.swaps) == ({}, 1)


def test_pin_brings_back_an_overlay_taken_back(rig: Rig) -> None:
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, b, 2))
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 1))
    assert (client.active_overlay_id, client.state.revoked) == (a, [b])
    with structlog.testing.capture_logs() as logs:
        client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.PIN, 2, overlay_id=b))
    assert (client.active_overlay_id, client.state.revoked) == (b, [])
    assert (logs[1]["event"], logs[1]["cause"]) == ("overlay_swapped", "pin")
    assert logs[0] == {
        "event": "overlay_control",
        "agent_id": "agent-0",
        "command": "pin",
        "overlay_id": b,
        "actor": "o",
        "reason": "test",
        "log_level": "info",
    }
    assert (client.state.hold, client.state.history) == (Hold.PINNED, ["base", a])


def test_a_narrower_release_keeps_the_widest_cohort(rig: Rig) -> None:
    """Cohorts are nested and never shrink: re-sending a release with a smaller fraction does
    not take the agents already on it off, nor lower what a later resume applies."""
    a = rig.overlay("a")
    clients = [rig.client(f"agent-{i}") for i in range(20)]
    wide = signed_release(rig, rig.signer, a, 1, rollout_fraction=0.6)
    narrow = signed_release(rig, rig.signer, a, 2, rollout_fraction=0.1)
    for c in clients:
        c.handle(RELEASE_TOPIC, wide)
        c.handle(RELEASE_TOPIC, narrow)
    on_a = {c.config.agent_id for c in clients if c.active_overlay_id == a}
    assert 2 < len(on_a) < 20
    assert {c.state.released[a] for c in clients} == {0.6}
    for c in clients:
        c.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.PAUSE, 1))
        c.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 3, rollout_fraction=0.1))
        c.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.RESUME, 2))
    assert {c.config.agent_id for c in clients if c.active_overlay_id == a} == on_a


def test_a_stored_envelope_that_is_not_the_overlay_named_means_base(rig: Rig) -> None:
    """The restart path re-reads the overlay in force from its stored envelope and trusts it
    only if it is a release of that very overlay: an envelope renamed to another overlay's
    file, or a stored control command, brings the agent up on base."""
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, b, 2))
    client.close()
    store = StateStore(rig.tmp / "agent-0")
    a_bytes = store.load_envelope(a)
    assert a_bytes is not None
    store.save_envelope(b, a_bytes)
    assert rig.client().active_overlay_id == "base"
    store.save_envelope(b, signed_control(rig, ControlKind.PAUSE, 1))
    state = store.load("agent-0", "pool-a")
    state.active = b
    store.save(state)
    assert rig.client().active_overlay_id == "base"


def test_the_clock_skew_allowed_is_the_configured_one(rig: Rig) -> None:
    """A release issued 20 s ahead of the agent's clock passes the default 30 s of skew and is
    refused as not yet valid by a client configured for 5 s."""
    a = rig.overlay("a")
    ahead = datetime.now(UTC) + timedelta(seconds=20)
    data = signed_release(rig, rig.signer, a, 1, issued_at=ahead)
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


def test_a_restarted_client_keeps_an_expired_overlay_built_from_its_stored_patch(
    rig: Rig,
) -> None:
    """Expiry bounds acceptance only: an agent restarted after its release expired comes back
    on it, and its HookSet is built from the patch the release carried."""
    a = rig.overlay("a")
    rig.client().handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 1))
    built: list[tuple[Patch, str]] = []

    def recording(patch: Patch, overlay_id: str) -> HookSet:
        built.append((patch, overlay_id))
        return rig.hooks_factory(patch, overlay_id)

    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    later = OverlayClient(
        config, rig.keyring, recording, now=lambda: datetime.now(UTC) + timedelta(days=2)
    )
    assert later.active_overlay_id == a
    assert built == [(rig.registry.get(a).patch, a)]


def test_an_overlay_stays_open_until_its_last_episode_ends(rig: Rig) -> None:
    """Two episodes on a when b arrives: a is closed when the second of them ends, once; the
    overlay in force is never closed by an episode ending."""
    closes: list[str] = []

    @dataclass
    class CountingHooks(TaggedHooks):
        def close(self) -> None:
            closes.append(self.overlay_id)
            self.closed = True

    source = RecordingSource(rig.bus.log)
    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    client = OverlayClient(
        config,
        rig.keyring,
        lambda patch, overlay_id: CountingHooks(overlay_id),
        source_factory=lambda _: source,
    )
    a, b = rig.overlay("a"), rig.overlay("b")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    with client.lease() as first:
        with client.lease():
            pass
        assert closes == []  # a is in force: an episode ending leaves it open
        with client.lease():
            rig.publisher.release(b, actor="x", reason="r")
            client.sync()
        assert closes == []  # the first episode still runs a
    assert first.overlay_id == a and closes == [a]
    with client.lease() as on_b:
        assert on_b.overlay_id == b
    assert closes == [a]
    client.close()
    assert closes == [a, b]  # a is not closed twice
    assert {wait for _, wait in source.polls} == {0}  # sync() does not wait by default


def test_a_rollback_naming_nothing_leaves_an_agent_on_base_where_it_is(rig: Rig) -> None:
    """After `rollback --to base` the overlays run before stay in the history; a later
    rollback that names nothing has nothing to take back from base and moves no one."""
    client = rig.client()
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, a, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, b, 2))
    with structlog.testing.capture_logs() as logs:
        client.handle(
            CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 1, overlay_id="base")
        )
    assert [(e["overlay_id"], e["previous"], e["cause"]) for e in logs if "cause" in e] == [
        ("base", b, "rollback")
    ]
    assert (client.active_overlay_id, client.state.history) == ("base", ["base", a])
    assert client.state.revoked == [b]
    assert client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 2))
    assert (client.active_overlay_id, client.state.history) == ("base", ["base", a])
    assert (client.state.revoked, client.swaps) == ([b], 3)


def test_handle_reports_a_message_that_failed_to_apply_as_not_accepted(rig: Rig) -> None:
    """The caller of `handle` learns that the release did not take (a disk that refuses the
    envelope), besides the `error` count."""
    client = rig.client()
    overlays = rig.tmp / "agent-0" / "overlays"
    shutil.rmtree(overlays)
    overlays.write_bytes(b"not a directory")
    assert (
        client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, rig.overlay("a"), 1)) is False
    )
    assert client.rejections == {"error": 1} and client.active_overlay_id == "base"


def test_each_overlay_draws_its_own_cohort(rig: Rig) -> None:
    """A staged release's cohort is drawn per overlay: otherwise the same agents would carry
    every canary and the same agents would always be the control arm."""
    from harness_r1.deploy.cohort import in_cohort

    overlays = [rig.overlay(f"c{i}") for i in range(20)]
    inside = [ov for ov in overlays if in_cohort("agent-0", ov, 0.5)]
    outside = [ov for ov in overlays if not in_cohort("agent-0", ov, 0.5)]
    assert inside and outside  # 20 draws at one half: both kinds, but for 2 in a million
    client = rig.client()
    half = {"rollout_fraction": 0.5}
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, inside[0], 1, **half))
    assert client.active_overlay_id == inside[0]
    client.handle(RELEASE_TOPIC, signed_release(rig, rig.signer, outside[0], 2, **half))
    assert client.active_overlay_id == inside[0]


def test_a_restart_keeps_an_overlay_whose_release_has_expired_by_the_wall_clock(
    rig: Rig,
) -> None:
    """The stored envelope is re-verified for its signature only, whatever the clock says: a
    release accepted two days ago (by the agent's clock then) still loads today."""
    a = rig.overlay("a")
    then = datetime.now(UTC) - timedelta(days=2)
    config = ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")
    before = OverlayClient(config, rig.keyring, rig.hooks_factory, now=lambda: then)
    data = signed_release(
        rig, rig.signer, a, 1, issued_at=then, expires_at=then + timedelta(minutes=10)
    )
    assert before.handle(RELEASE_TOPIC, data)
    today = OverlayClient(config, rig.keyring, rig.hooks_factory)
    assert today.active_overlay_id == a
    with today.lease() as lease:
        assert lease.hooks.overlay_id == a


def test_a_retired_key_keeps_the_stored_overlay_across_a_restart_and_nothing_else(
    rig: Rig,
) -> None:
    """Key rotation (issue 18): with the old key moved to `retired/`, a restarted agent comes
    back on the overlay that key signed (not on base); a new message signed with it is refused
    as from an unknown key. With the old key gone altogether, the restart falls back to base."""
    client = rig.client()
    a = rig.overlay("a")
    rig.publisher.release(a, actor="x", reason="r")
    client.sync()
    client.close()
    new = Signer("k2", Ed25519PrivateKey.generate())
    rotated = dataclasses.replace(rig, keyring=Keyring.of([new], retired=[rig.signer]))
    rig.bus.offline = True
    again = rotated.client()
    assert again.active_overlay_id == a  # verified with the retired key: it was accepted before
    again.close()
    rig.bus.offline = False
    b = rig.overlay("b")
    rig.publisher.release(b, actor="x", reason="signed with the retired key")
    fresh = rotated.client()
    fresh.sync()
    assert fresh.active_overlay_id == a and fresh.rejections == {"unknown_key": 1}
    fresh.close()
    gone = dataclasses.replace(rig, keyring=Keyring.of([new]))
    rig.bus.offline = True
    assert gone.client().active_overlay_id == "base"


def test_keyring_reads_retired_keys_from_their_folder(tmp_path: Path) -> None:
    from harness_r1.deploy.signing import generate_keypair

    generate_keypair(tmp_path, "new")
    generate_keypair(tmp_path / "retired", "old")
    keyring = Keyring.from_directory(tmp_path)
    assert keyring.get("new") is not None and keyring.get("old") is None
    assert keyring.get("old", retired_ok=True) is not None
