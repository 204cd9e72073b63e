"""Control commands in the agent-side overlay client: rollback (to the previous overlay, a
named one or base; past overlays taken back earlier; of one overlay only; after it expired) and
what it takes back, pause, pin and resume, and the registry's side of taking an overlay back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import structlog
from deploy_rig import Rig, signed_control, signed_release

from harness_r1.contracts import ControlKind
from harness_r1.deploy.client import CONTROL_TOPIC, RELEASE_TOPIC, OverlayClient
from harness_r1.deploy.registry_records import OverlayState
from harness_r1.deploy.state import Hold
from harness_r1.harness.hooks import NoHooks


def test_rollback_returns_to_previous_and_refuses_a_late_release(
    rig: Rig, client: OverlayClient
) -> None:
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
        assert client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, b, 99))
    assert client.active_overlay_id == a
    assert logs == [
        {"event": "overlay_release_ignored_revoked", "overlay_id": b, "log_level": "info"}
    ]


def test_rollback_to_named_and_to_base(rig: Rig, client: OverlayClient) -> None:
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


def test_rollback_to_an_overlay_never_received_means_base(rig: Rig, client: OverlayClient) -> None:
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


def test_rollback_skips_overlays_taken_back_earlier(rig: Rig, client: OverlayClient) -> None:
    """Releases a, b, c; b is taken back while the agent runs c (it stays on c); a rollback
    of c then goes to a, the newest earlier overlay not taken back."""
    a, b, c = rig.overlay("a"), rig.overlay("b"), rig.overlay("c")
    for seq, ov in enumerate((a, b, c), start=1):
        client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, ov, seq))
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


def test_a_rollback_drops_a_parked_release_of_what_it_takes_back(
    rig: Rig, client: OverlayClient
) -> None:
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 1))
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.PAUSE, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, b, 2))
    assert client.state.pending == b
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.ROLLBACK, 2, revoke_overlay_id=b))
    assert (client.active_overlay_id, client.state.pending, client.state.revoked) == (a, None, [b])
    client.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.RESUME, 3))
    assert (client.active_overlay_id, client.state.hold) == (a, Hold.NONE)
    assert (client.rejections, client.swaps) == ({}, 1)


def test_a_rollback_naming_nothing_leaves_an_agent_on_base_where_it_is(
    rig: Rig, client: OverlayClient
) -> None:
    """After `rollback --to base` the overlays run before stay in the history; a later
    rollback that names nothing has nothing to take back from base and moves no one."""
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, b, 2))
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


def test_taken_back_overlays_cannot_be_released_again_only_pinned(rig: Rig) -> None:
    from harness_r1.deploy.registry_records import InvalidTransition

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


def test_pause_pin_resume(rig: Rig, client: OverlayClient) -> None:
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


def test_pin_brings_back_an_overlay_taken_back(rig: Rig, client: OverlayClient) -> None:
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, b, 2))
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
