"""The agent-side overlay client applying releases, on an in-memory log (the broker is in
test_fleet.py): a release activates its overlay, a swap waits for the episode boundary and an
overlay stays open until its last episode ends, a staged release reaches a nested cohort drawn
per overlay, and the history keeps the last 32 overlays.

What the client refuses is in test_client_refusals.py, control commands in
test_client_control.py, restarts in test_client_restart.py, and the client as operators run it
(its thread, closing, failures, logs and metrics) in test_client_operations.py."""

from __future__ import annotations

from dataclasses import dataclass

from deploy_rig import RecordingSource, Rig, TaggedHooks, signed_control, signed_release

from harness_r1.contracts import ControlKind
from harness_r1.deploy.client import CONTROL_TOPIC, RELEASE_TOPIC, ClientConfig, OverlayClient
from harness_r1.deploy.registry_records import OverlayState


def test_release_activates_and_lease_stamps_the_overlay(rig: Rig, client: OverlayClient) -> None:
    assert client.active_overlay_id == "base"
    ov = rig.overlay("a")
    rig.publisher.release(ov, actor="alice", reason="canary won")
    assert client.sync() == 1
    with client.lease() as lease:
        assert lease.overlay_id == ov == lease.hooks.overlay_id
    assert rig.registry.get(ov).state is OverlayState.ACTIVE


def test_swap_waits_for_the_episode_boundary(rig: Rig, client: OverlayClient) -> None:
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


def test_an_overlay_stays_open_until_its_last_episode_ends(
    rig: Rig, agent_config: ClientConfig
) -> None:
    """Two episodes on a when b arrives: a is closed when the second of them ends, once; the
    overlay in force is never closed by an episode ending."""
    closes: list[str] = []

    @dataclass
    class CountingHooks(TaggedHooks):
        def close(self) -> None:
            closes.append(self.overlay_id)
            self.closed = True

    source = RecordingSource(rig.bus.log)
    client = OverlayClient(
        agent_config,
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


def test_history_keeps_the_last_32_overlays(rig: Rig, client: OverlayClient) -> None:
    overlays = [rig.overlay(f"o{i}") for i in range(34)]
    for seq, ov in enumerate(overlays, start=1):
        client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, ov, seq))
    assert client.active_overlay_id == overlays[-1]
    assert client.state.history == overlays[1:33]
    # no episode held the earlier ones: each HookSet was closed when the next one came
    assert [h.closed for h in rig.hooks_made] == [True] * 33 + [False]


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


def test_a_narrower_release_keeps_the_widest_cohort(rig: Rig) -> None:
    """Cohorts are nested and never shrink: re-sending a release with a smaller fraction does
    not take the agents already on it off, nor lower what a later resume applies."""
    a = rig.overlay("a")
    clients = [rig.client(f"agent-{i}") for i in range(20)]
    wide = signed_release(rig.registry, rig.signer, a, 1, rollout_fraction=0.6)
    narrow = signed_release(rig.registry, rig.signer, a, 2, rollout_fraction=0.1)
    for c in clients:
        c.handle(RELEASE_TOPIC, wide)
        c.handle(RELEASE_TOPIC, narrow)
    on_a = {c.config.agent_id for c in clients if c.active_overlay_id == a}
    assert 2 < len(on_a) < 20
    assert {c.state.released[a] for c in clients} == {0.6}
    for c in clients:
        c.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.PAUSE, 1))
        c.handle(
            RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 3, rollout_fraction=0.1)
        )
        c.handle(CONTROL_TOPIC, signed_control(rig, ControlKind.RESUME, 2))
    assert {c.config.agent_id for c in clients if c.active_overlay_id == a} == on_a


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
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, inside[0], 1, **half))
    assert client.active_overlay_id == inside[0]
    client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, outside[0], 2, **half))
    assert client.active_overlay_id == inside[0]
