"""What survives a restart of the agent-side overlay client: the overlay in force and the
high-water marks, read on from the saved positions; a stored envelope re-verified (signature,
target, the overlay it names) and base where it fails; an expired release kept; a retired key's
overlay kept, and the keyring's retired folder."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from deploy_rig import Rig, signed_control, signed_release

from harness_r1.contracts import ControlKind, Patch
from harness_r1.deploy.client import RELEASE_TOPIC, ClientConfig, OverlayClient
from harness_r1.deploy.signing import Keyring, Signer
from harness_r1.deploy.state import ClientStateStore, Hold
from harness_r1.harness.hooks import HookSet, NoHooks


def test_restart_without_broker_keeps_last_good_overlay_and_hwm(
    rig: Rig, client: OverlayClient
) -> None:
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


def test_a_restarted_client_reads_on_from_where_it_stopped(rig: Rig, client: OverlayClient) -> None:
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


def test_tampered_state_file_falls_back_to_base(rig: Rig, client: OverlayClient) -> None:
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
    store = ClientStateStore(rig.tmp / "agent-0")  # pool-a's agent-0
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


def test_a_stored_envelope_that_is_not_the_overlay_named_means_base(
    rig: Rig, client: OverlayClient
) -> None:
    """The restart path re-reads the overlay in force from its stored envelope and trusts it
    only if it is a release of that very overlay: an envelope renamed to another overlay's
    file, or a stored control command, brings the agent up on base."""
    a, b = rig.overlay("a"), rig.overlay("b")
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 1))
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, b, 2))
    client.close()
    store = ClientStateStore(rig.tmp / "agent-0")
    a_bytes = store.load_envelope(a)
    assert a_bytes is not None
    store.save_envelope(b, a_bytes)
    assert rig.client().active_overlay_id == "base"
    store.save_envelope(b, signed_control(rig, ControlKind.PAUSE, 1))
    state = store.load("agent-0", "pool-a")
    state.active = b
    store.save(state)
    assert rig.client().active_overlay_id == "base"


def test_a_restarted_client_keeps_an_expired_overlay_built_from_its_stored_patch(
    rig: Rig, agent_config: ClientConfig
) -> None:
    """Expiry bounds acceptance only: an agent restarted after its release expired comes back
    on it, and its HookSet is built from the patch the release carried."""
    a = rig.overlay("a")
    rig.client().handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 1))
    built: list[tuple[Patch, str]] = []

    def recording(patch: Patch, overlay_id: str) -> HookSet:
        built.append((patch, overlay_id))
        return rig.hooks_factory(patch, overlay_id)

    later = OverlayClient(
        agent_config, rig.keyring, recording, now=lambda: datetime.now(UTC) + timedelta(days=2)
    )
    assert later.active_overlay_id == a
    assert built == [(rig.registry.get(a).patch, a)]


def test_a_restart_keeps_an_overlay_whose_release_has_expired_by_the_wall_clock(
    rig: Rig, agent_config: ClientConfig
) -> None:
    """The stored envelope is re-verified for its signature only, whatever the clock says: a
    release accepted two days ago (by the agent's clock then) still loads today."""
    a = rig.overlay("a")
    then = datetime.now(UTC) - timedelta(days=2)
    before = OverlayClient(agent_config, rig.keyring, rig.hooks_factory, now=lambda: then)
    data = signed_release(
        rig.registry, rig.signer, a, 1, issued_at=then, expires_at=then + timedelta(minutes=10)
    )
    assert before.handle(RELEASE_TOPIC, data)
    today = OverlayClient(agent_config, rig.keyring, rig.hooks_factory)
    assert today.active_overlay_id == a
    with today.lease() as lease:
        assert lease.hooks.overlay_id == a


def test_a_retired_key_keeps_the_stored_overlay_across_a_restart_and_nothing_else(
    rig: Rig, client: OverlayClient
) -> None:
    """Key rotation (issue 18): with the old key moved to `retired/`, a restarted agent comes
    back on the overlay that key signed (not on base); a new message signed with it is refused
    as from an unknown key. With the old key gone altogether, the restart falls back to base."""
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
