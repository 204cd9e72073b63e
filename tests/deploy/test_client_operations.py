"""The agent-side overlay client as operators run it: its background thread and closing, a
message that fails to apply or an overlay whose hooks cannot start (base, counted, logged), and
everything it logs and counts (the metric families, a whole run's events, counters and state)."""

from __future__ import annotations

import shutil
import threading
import time

import structlog
from deploy_rig import RecordingSource, Rig, signed_release

from harness_r1.contracts import ControlKind, Patch
from harness_r1.deploy.client import RELEASE_TOPIC, ClientConfig, ClientMetrics, OverlayClient
from harness_r1.deploy.state import STATE_FILE, ClientState, ClientStateStore, Hold
from harness_r1.harness.hooks import HookSet, NoHooks


def client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "overlay-client"]


def counter_totals(metrics: ClientMetrics) -> dict[tuple[str, tuple[str, ...]], float]:
    """Every `_total` sample of the client's families: (name, label values) -> value."""
    return {
        (sample.name, tuple(sample.labels.values())): sample.value
        for counter in (metrics.messages, metrics.rejections, metrics.swaps)
        for family in counter.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_started_client_applies_releases_in_the_background_and_outlives_a_failing_poll(
    rig: Rig, agent_config: ClientConfig
) -> None:
    """Issue 21: `start()` runs one daemon thread (it never holds the agent's exit) named
    overlay-client, polling with the sync interval (100 ms by default) as its wait. A poll
    that raises is logged and retried a second later, not in a tight loop; `close()` stops
    the thread."""
    source = RecordingSource(rig.bus.log, failures=1)
    client = OverlayClient(
        agent_config, rig.keyring, rig.hooks_factory, source_factory=lambda _: source
    )
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


def test_a_client_without_a_source_starts_no_thread(rig: Rig, agent_config: ClientConfig) -> None:
    client = OverlayClient(agent_config, rig.keyring, rig.hooks_factory)
    client.start(interval_ms=10)
    assert client_threads() == []
    assert client.sync() == 0
    client.close()


def test_close_stops_reading_and_closes_every_hookset_still_open(
    rig: Rig, agent_config: ClientConfig
) -> None:
    """The overlay in force and one kept open by a running episode are both closed."""
    closed: list[str] = []

    class ClosingSource(RecordingSource):
        def close(self) -> None:
            closed.append("source")

    source = ClosingSource(rig.bus.log)
    client = OverlayClient(
        agent_config, rig.keyring, rig.hooks_factory, source_factory=lambda _: source
    )
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


def test_handle_reports_a_message_that_failed_to_apply_as_not_accepted(
    rig: Rig, client: OverlayClient
) -> None:
    """The caller of `handle` learns that the release did not take (a disk that refuses the
    envelope), besides the `error` count."""
    overlays = rig.tmp / "agent-0" / "overlays"
    shutil.rmtree(overlays)
    overlays.write_bytes(b"not a directory")
    assert (
        client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, rig.overlay("a"), 1))
        is False
    )
    assert client.rejections == {"error": 1} and client.active_overlay_id == "base"


def test_an_overlay_whose_hooks_cannot_start_leaves_the_agent_on_base(
    rig: Rig, agent_config: ClientConfig
) -> None:
    """A HookSet that fails to build is the safe side: base, logged and counted."""

    def broken(patch: Patch, overlay_id: str) -> HookSet:
        raise RuntimeError("sandbox would not start")

    client = OverlayClient(agent_config, rig.keyring, broken)
    a = rig.overlay("a")
    with structlog.testing.capture_logs() as logs:
        assert client.handle(RELEASE_TOPIC, signed_release(rig.registry, rig.signer, a, 1))
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


def test_an_operators_view_of_a_run_logs_counters_and_state(
    rig: Rig, client_metrics: ClientMetrics
) -> None:
    """Issue 21: one run of the client as the operator sees it, in full: every event the client
    logs (swaps with their cause, each control command with who sent it and why, a refusal), the
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
    assert ClientStateStore(rig.tmp / "agent-0").load("agent-0", "pool-a") == expected
    client.close()
