"""Logs carry the bound ids; the health server answers /metrics, /healthz and /readyz."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry

from harness_r1.daemon.health import HealthServer
from harness_r1.daemon.logs import configure_logging
from harness_r1.daemon.metrics import DaemonMetrics


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state: put it back for the other tests."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_carry_bound_ids(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    log = structlog.get_logger("harness_r1.daemon.test")
    ids = {"packet_id": "pkt-1", "overlay_id": "ovl-2", "group_id": "grp-3"}
    with structlog.contextvars.bound_contextvars(**ids):
        log.info("candidate_evaluated", delta=0.25)
        logging.getLogger("kafka.conn").warning("broker said %s", "hello")
        log.debug("too fine to be written")
    log.info("outside")

    first, foreign, outside = lines(stream)
    assert first["event"] == "candidate_evaluated" and first["delta"] == 0.25
    assert (first["level"], first["logger"]) == ("info", "harness_r1.daemon.test")
    assert str(first["timestamp"]).endswith("Z") and "T" in str(first["timestamp"])
    assert ids.items() <= first.items()
    assert foreign["event"] == "broker said hello" and foreign["logger"] == "kafka.conn"
    assert ids.items() <= foreign.items()  # a library's stdlib line gets them too
    assert outside["event"] == "outside" and "packet_id" not in outside


def test_reconfiguring_replaces_the_handler(restore_logging: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", "info", stream=first)
    configure_logging("console", "warning", stream=second)
    log = structlog.get_logger("x")
    log.info("dropped")
    log.warning("kept", packet_id="p")
    assert first.getvalue() == ""
    assert "kept" in second.getvalue() and "dropped" not in second.getvalue()
    with pytest.raises(ValueError, match="log level 'loud'"):
        configure_logging("json", "loud")
    with pytest.raises(ValueError, match="log format 'xml'"):
        configure_logging("xml", "info")


def test_win_rate_over_the_last_n_candidates() -> None:
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, win_window=4)
    for delta in (0.5, -0.1, 0.0, 0.2, 0.3):  # window keeps the last 4: -0.1, 0.0, 0.2, 0.3
        metrics.observe_canary("dbbench", delta)
    rate = registry.get_sample_value("harness_r1_patch_win_rate", {"env": "dbbench"})
    assert rate == 0.5
    count = registry.get_sample_value("harness_r1_canary_delta_count", {"env": "dbbench"})
    assert count == 5
    below_zero = registry.get_sample_value(
        "harness_r1_canary_delta_bucket", {"env": "dbbench", "le": "0.0"}
    )
    assert below_zero == 2


def test_forced_share_of_stored_steps_and_of_candidates() -> None:
    """Steps counted by origin as polls store them; the gauge is the forced share since start
    (NaN before any step), from the same counts; candidates' shares go into histograms."""
    import math

    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry)
    share = registry.get_sample_value("harness_r1_forced_action_share", {"env": "webshop"})
    assert share is not None and math.isnan(share)
    metrics.observe_steps({("webshop", "forced"): 3, ("webshop", "model"): 1})
    metrics.observe_steps({("webshop", "model"): 4, ("dbbench", "vetoed_then_model"): 2})
    steps = registry.get_sample_value(
        "harness_r1_action_steps_total", {"env": "webshop", "origin": "model"}
    )
    assert steps == 5
    assert registry.get_sample_value("harness_r1_forced_action_share", {"env": "webshop"}) == 3 / 8
    assert registry.get_sample_value("harness_r1_forced_action_share", {"env": "dbbench"}) == 0.0
    metrics.observe_attribution("webshop", 1.0, 0.75)
    metrics.observe_attribution("webshop", None, None)  # not measured: nothing observed
    forced = registry.get_sample_value(
        "harness_r1_candidate_forced_share_count", {"env": "webshop"}
    )
    alone = registry.get_sample_value(
        "harness_r1_candidate_patch_alone_success_sum", {"env": "webshop"}
    )
    assert (forced, alone) == (1, 0.75)


def test_health_server_routes() -> None:
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry)
    metrics.trajectories_consumed.labels(env="alfworld", outcome="failure").inc()
    metrics.committed()
    metrics.set_engineer_version("grpo-0003")
    state = {"ready": False}

    def ready() -> tuple[bool, str]:
        return (True, "consuming") if state["ready"] else (False, "no partitions assigned yet")

    server = HealthServer(registry, "127.0.0.1", 0, ready)
    server.start()
    try:
        assert server.port != 0
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", trust_env=False) as http:
            scraped = http.get("/metrics")
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain")
            assert (
                'harness_r1_trajectories_consumed_total{env="alfworld",outcome="failure"} 1.0'
                in scraped.text
            )
            assert 'harness_r1_engineer_info{version="grpo-0003"} 1.0' in scraped.text

            health = http.get("/healthz")
            assert (health.status_code, health.text) == (200, "ok\n")

            not_ready = http.get("/readyz")
            assert not_ready.status_code == 503
            assert "no partitions assigned yet" in not_ready.text
            state["ready"] = True
            now_ready = http.get("/readyz?verbose=1")
            assert (now_ready.status_code, now_ready.text) == (200, "consuming\n")

            assert http.get("/").status_code == 404
            assert http.get("/metricsx").status_code == 404
    finally:
        server.stop()
    server.stop()  # twice is fine


def test_a_failing_ready_check_is_not_ready() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("store unreachable")

    health = HealthServer(CollectorRegistry(), "127.0.0.1", 0, broken)
    status, _, body = health.respond("/readyz")
    assert status == 503 and b"RuntimeError: store unreachable" in body


def test_readiness_is_a_metric_asked_at_every_scrape() -> None:
    """`harness_r1_ready` says what /readyz would answer now (an alert needs no probe), and a
    check that raises reads as not ready."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry)
    answers = iter([(True, "ready"), (False, "store locked")])

    def ready() -> tuple[bool, str]:
        try:
            return next(answers)
        except StopIteration:
            raise RuntimeError("check broke") from None

    metrics.watch_readiness(ready)
    assert [registry.get_sample_value("harness_r1_ready") for _ in range(3)] == [1.0, 0.0, 0.0]


def test_live_guard_metrics_and_a_sandbox_gauge_unknown_until_a_worker_starts() -> None:
    import math

    from harness_r1.daemon.wiring import MetricsAdapter
    from harness_r1.sandbox.metrics import SandboxMetrics

    registry = CollectorRegistry()
    adapter = MetricsAdapter(DaemonMetrics(registry))
    sample = registry.get_sample_value
    assert sample("harness_r1_guard_decisions_total", {"verdict": "rollback"}) == 0.0
    adapter.guard(2, ["promote", "rollback"])
    adapter.guard(1, [])
    assert sample("harness_r1_guard_watching") == 1.0
    assert sample("harness_r1_guard_decisions_total", {"verdict": "promote"}) == 1.0
    assert sample("harness_r1_guard_decisions_total", {"verdict": "rollback"}) == 1.0
    SandboxMetrics(registry)
    isolated = sample("harness_r1_sandbox_isolated")
    assert isolated is not None and math.isnan(isolated)  # no worker yet: not "0, missing"


def test_repeated_library_warnings_pass_once_a_minute_with_a_count() -> None:
    """kafka-python's `No node available` while the broker is away (~15 a second): one line a
    minute per message, the next one saying how many were dropped; our own lines all pass."""
    import logging

    from harness_r1.daemon.logs import RepeatFilter

    now = [0.0]
    repeat = RepeatFilter(interval_s=60, clock=lambda: now[0])

    def record(name: str, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)

    kafka_lines = []
    for second in range(0, 150):
        now[0] = float(second)
        for _ in range(15):
            r = record("kafka.cluster", "No node available for metadata refresh")
            if repeat.filter(r):
                kafka_lines.append((second, r.getMessage()))
    assert [s for s, _ in kafka_lines] == [0, 60, 120]
    assert kafka_lines[1][1].endswith("(repeated 899 times in the last 60 s)")
    assert all(repeat.filter(record("harness_r1.daemon", "broker_unreachable")) for _ in range(5))
    assert repeat.filter(record("kafka.conn", "another message"))  # keyed by message


def test_a_plugin_env_gets_its_own_label_and_an_unknown_one_is_other() -> None:
    """The daemon builds its metrics for the installed envs: an operator's own env is watched
    by name from the first scrape, while an env no installed package provides stays "other"."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, envs=("dbbench", "textworld"))
    ready = registry.get_sample_value(
        "harness_r1_trajectories_consumed_total", {"env": "textworld", "outcome": "failure"}
    )
    assert ready == 0.0
    metrics.observe_canary("textworld", 0.25)
    metrics.observe_canary("typo_env", 0.25)
    assert registry.get_sample_value("harness_r1_patch_win_rate", {"env": "textworld"}) == 1.0
    assert registry.get_sample_value("harness_r1_patch_win_rate", {"env": "other"}) == 1.0
    assert registry.get_sample_value("harness_r1_patch_win_rate", {"env": "typo_env"}) is None
