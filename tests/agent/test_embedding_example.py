"""examples/embedding/my_agent.py, as docs/embedding.md runs it: the example agent in its own
process against the daemon (`build_daemon`, ingest only) on the embedded broker, sharing one
settings file with it. Its trajectories reach the daemon's store; an operator registers and
releases the example's overlay with `harness-r1 overlay add|release`; the agent verifies it and
applies it at its next episode boundary: the episodes after it carry the overlay's id, and
their steps carry what its hook (run in the isolated worker) said. Ctrl-C stops the agent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers import EmbeddedBroker
from harness_r1.contracts import HookName, Trajectory
from harness_r1.daemon import build_daemon
from harness_r1.daemon.settings import Settings, load_settings
from harness_r1.deploy import generate_keypair

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedding"
POOL, AGENT = "shop-pool", "shop-1"
runner = CliRunner()


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def settings_file(folder: Path, bootstrap: str) -> Path:
    """One file for the daemon and the agent: the daemon signs with the private key, the
    agent trusts the public one (keys_dir); fresh topics and store; no batch is ever sealed
    (this test is about the agent, not the loop)."""
    generate_keypair(folder / "keys", "ops-1")
    run = uuid.uuid4().hex[:8]
    config = {
        "data": str(Settings().data_root()),
        "cache": "cache",
        "state_url": f"sqlite:///{folder / 'state.db'}",
        "kafka_bootstrap": bootstrap,
        "trajectory_topic": f"traj-{run}",
        "release_topic": f"rel-{run}",
        "control_topic": f"ctl-{run}",
        "signing_key": "keys/ops-1.key",
        "keys_dir": "keys",
        "kafka": {"dead_letter_topic": f"dlq-{run}", "events_topic": f"events-{run}"},
        "loop": {"batch_size": 1_000_000, "batch_window_s": 1e9, "release_target": POOL},
        "sandbox": {"accept_shared_uid": os.geteuid() != 0},
        "metrics": {"port": 0},
    }
    path = folder / "harness-r1.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def stored(url: str) -> list[tuple[str, str, str]]:
    """(trajectory_id, agent_id, harness_version) of every trajectory the daemon stored."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT trajectory_id, agent_id, harness_version FROM daemon_trajectories")
            ).all()
    finally:
        engine.dispose()
    return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]


@pytest.fixture
def daemon(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Iterator[Settings]:
    path = settings_file(tmp_path, kafka_broker.bootstrap)
    settings = load_settings(path)
    built = build_daemon(settings, key=uuid.uuid4().hex)
    built.health.start()
    built.daemon.start()
    try:
        yield settings
    finally:
        built.daemon.stop()
        built.health.stop()
        built.close()


def test_the_example_agent_reports_to_the_daemon_and_takes_a_release(
    tmp_path: Path, daemon: Settings
) -> None:
    config = tmp_path / "harness-r1.yaml"
    url = daemon.registry_url()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_R1_")}
    out = (tmp_path / "agent.out").open("w")
    err = (tmp_path / "agent.err").open("w")
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "my_agent.py"), "--settings", str(config)]
        + ["--agent-id", AGENT, "--episodes", "0", "--pause", "0.2"],
        stdout=out,
        stderr=err,
        env=env,
    )

    def versions() -> list[str]:
        return [version for _, agent_id, version in stored(url) if agent_id == AGENT]

    try:
        wait_for(lambda: len(versions()) >= 2, 60, "two of the agent's episodes in the store")
        assert set(versions()) == {"base"}

        added = runner.invoke(
            app,
            ["--config", str(config), "overlay", "add", str(EXAMPLE / "remind_options.patch")]
            + ["--target", POOL],
        )
        assert added.exit_code == 0, added.output
        overlay = added.stdout.strip().splitlines()[-1]
        released = runner.invoke(app, ["--config", str(config), "overlay", "release", overlay])
        assert released.exit_code == 0, released.output
        assert f"released {overlay} to {POOL}" in released.stdout

        wait_for(
            lambda: versions().count(overlay) >= 2, 30, "two episodes under the overlay stored"
        )
    finally:
        agent.send_signal(signal.SIGINT)
        try:
            code = agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            agent.kill()
            raise
        out.close()
        err.close()
    log = (tmp_path / "agent.err").read_text()
    assert code == 130, log
    assert "stopped after" in log

    lines = [line.split() for line in (tmp_path / "agent.out").read_text().splitlines()]
    episodes = [
        dict(part.split("=", 1) for part in line[2:]) for line in lines if line[:1] == ["episode"]
    ]
    printed = [e["overlay"] for e in episodes]
    # swapped at an episode boundary, once: base up to some episode, the overlay from the next
    first = printed.index(overlay)
    assert set(printed[:first]) == {"base"} and set(printed[first:]) == {overlay}

    # every episode it printed reached the daemon (the last one perhaps a moment later)
    wait_for(lambda: len(versions()) >= len(printed), 20, "every printed episode stored")
    rows = [row for row in stored(url) if row[1] == AGENT]
    assert sorted(version for _, _, version in rows) == sorted(printed)
    from harness_r1.daemon.store import StateStore

    store = StateStore(url)
    try:
        payloads = store.load_trajectory_payloads([tid for tid, _, _ in rows])
    finally:
        store.close()
    trajectories = [Trajectory.model_validate_json(p) for p in payloads]
    assert {t.target.model_id for t in trajectories} == {"rules-shopper"}
    for trajectory in trajectories:
        said = [e.hook for step in trajectory.steps for e in step.effects]
        # the overlay's pre_decision hook spoke on every step it ran; the base harness never
        expected = len(trajectory.steps) if trajectory.harness_version == overlay else 0
        assert said.count(HookName.PRE_DECISION) == expected, trajectory.harness_version
