"""Durability of ingestion under failure, on the real broker (embedded tansu).

1. SIGKILL chaos: the daemon runs as its own process (`harness-r1 run --config FILE`) and is
   killed with SIGKILL at random points while it ingests 3000 trajectories from a 2-partition
   topic, restarted each time; in the end every trajectory is stored exactly once, every
   failure is buffered exactly once, the stored positions cover the whole topic, and SIGTERM
   drains the last daemon to a clean exit.
2. Broker restart: the broker (tansu on S3 storage, served by a local moto server) goes away
   under an in-process daemon and comes back on the same port and storage; the daemon keeps
   running, says the broker is unreachable meanwhile, and then ingests the rest without
   re-ingesting what it already had.

No batch is ever sealed here (huge batch size and window): these tests are about ingest.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from harness_r1.consumers.broker import EmbeddedBroker, free_port
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.packets import is_failure
from harness_r1.consumers.producer import make_producer
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import Outcome, TargetRef, TaskRef, Termination, Timings, Trajectory
from harness_r1.contracts.trajectory import Step
from harness_r1.daemon.settings import KafkaOptions, LoopOptions, MetricsOptions, Settings
from harness_r1.daemon.store import StateStore
from harness_r1.daemon.wiring import build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration

N = 3000
KILLS = 5
PARTITIONS = 2
GROUP = "durability-daemon"
STREAM_S = 10.0  # the chaos test's second half streams in over this long
NEVER_BATCH, NEVER_WINDOW_S = 1_000_000, 1e9  # no failure batch is ever sealed
HARNESS_R1 = Path(sys.executable).parent / "harness-r1"


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def synthetic_trajectory(i: int, rng: random.Random) -> Trajectory:
    """A valid dbbench trajectory of ~1-3 KB; about 40% are failures (some with a success
    flag but a partial reward, which also counts as a failure)."""
    now = datetime.now(UTC)
    roll = rng.random()
    success = roll >= 0.35
    reward = 1.0 if roll >= 0.4 else (0.5 if success else 0.0)
    steps = [
        Step(
            index=s,
            observation=f"Table t{i % 7} has columns id, name, price. "
            + "row " * rng.randint(25, 90),
            raw_output=f"Thought: look up row {s}.\nAction: Operation",
            action=f"SELECT * FROM t{i % 7} WHERE id = {s}",
            feedback="[(1, 'a', 2.5)]" * rng.randint(1, 10),
        )
        for s in range(rng.randint(2, 5))
    ]
    return Trajectory(
        trajectory_id=f"chaos-{i:05d}-{uuid.uuid4().hex[:8]}",
        agent_id=f"agent-{i % 4}",
        target=TargetRef(model_id="smollm2-135m", version="1"),
        harness_version=rng.choice(["base", "overlay-a"]),
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id=f"dev-{i % 50:03d}",  # a real dev task: the canary could replay it
            task_type="SELECT",
            instruction="How many rows have a price above 2?",
            seed=i,
        ),
        steps=steps,
        outcome=Outcome(
            success=success,
            reward=reward,
            termination=Termination.SUCCESS if success else Termination.FAILURE,
            steps=len(steps),
        ),
        timings=Timings(started_at=now, finished_at=now),
    )


def produce(
    bootstrap: str,
    topic: str,
    trajectories: Sequence[Trajectory],
    *,
    start: int = 0,
    over_s: float = 0.0,
) -> dict[int, int]:
    """Send all, round-robin over the partitions (record i of the topic to partition
    (start + i) % PARTITIONS), spread evenly over `over_s` seconds (0: at once), and wait for
    every ack; returns the end offset (one past the last acked record) per partition."""
    # S3-backed tansu (moto) acks slowly right after a restart: give deliveries 60 s, not 10
    producer = make_producer(KafkaSettings(bootstrap=bootstrap, send_timeout_s=60.0))
    try:
        began = time.monotonic()
        futures = []
        for i, t in enumerate(trajectories):
            if over_s:
                time.sleep(max(0.0, began + over_s * i / len(trajectories) - time.monotonic()))
            partition = (start + i) % PARTITIONS
            futures.append(producer.send(topic, value=t.to_json_bytes(), partition=partition))
        producer.flush(timeout=60)
        ends: dict[int, int] = {}
        for future in futures:
            meta = future.get(timeout=30)
            ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
        return ends
    finally:
        producer.close(timeout=5)


class Streamer(threading.Thread):
    """`produce(..., over_s=...)` in the background; `result()` re-raises its failure."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(name="streamer", daemon=True)
        self._call = lambda: produce(*args, **kwargs)  # type: ignore[arg-type]
        self._ends: dict[int, int] | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._ends = self._call()
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            self._error = err

    def result(self, timeout_s: float) -> dict[int, int]:
        self.join(timeout_s)
        if self.is_alive():
            raise AssertionError(f"the background producer did not finish in {timeout_s} s")
        if self._error is not None:
            raise self._error
        assert self._ends is not None
        return self._ends


def stored_positions(store: StateStore, topic: str) -> dict[int, int]:
    return {p: o for (t, p), o in store.positions(GROUP).items() if t == topic}


# --- 1. SIGKILL chaos -----------------------------------------------------------------------


def write_config(tmp_path: Path, bootstrap: str, topic: str, run: str) -> Path:
    config = {
        "data": str(Settings().data_root()),
        "cache": str(tmp_path / "cache"),
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "kafka_bootstrap": bootstrap,
        "trajectory_topic": topic,
        "release_topic": f"rel-{run}",
        "control_topic": f"ctl-{run}",
        "kafka": {
            "group_id": GROUP,
            "dead_letter_topic": f"dlq-{run}",
            "events_topic": f"events-{run}",
            "poll_timeout_ms": 200,
        },
        "loop": {
            "batch_size": NEVER_BATCH,
            "batch_window_s": NEVER_WINDOW_S,
            "engineer_backend": "template",
        },
        "metrics": {"port": 0, "log_level": "warning"},
    }
    path = tmp_path / "daemon.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


class DaemonProcess:
    """`harness-r1 run --config FILE` in its own process; output to a log file."""

    def __init__(self, config: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_R1_")}
        self.log = log
        self._offset = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(HARNESS_R1), "run", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def wait_started(self, timeout_s: float = 60.0) -> None:
        def started() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.process.returncode}:\n{self.tail()}"
                )
            with self.log.open("rb") as f:
                f.seek(self._offset)
                return b"daemon_listening" in f.read()

        wait_for(started, timeout_s, "the daemon to start")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def test_sigkill_chaos_loses_and_duplicates_nothing(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    """Half of the trajectories wait on the topic before the first daemon starts (so early
    kills land in a busy catch-up: store transactions back to back); the other half streams
    in while the kills go on (so kills land mid-ingest however fast this machine ingests: a
    backlog alone is done in ~1.5 s here, inside the kill window)."""
    run = uuid.uuid4().hex[:8]
    topic = f"chaos-{run}"
    kafka = KafkaSettings(bootstrap=kafka_broker.bootstrap)
    ensure_topics(kafka, [topic], partitions=PARTITIONS)
    rng = random.Random(20240611)
    trajectories = [synthetic_trajectory(i, rng) for i in range(N)]
    sizes = sorted(len(t.to_json_bytes()) for t in trajectories)
    assert 1000 <= sizes[N // 2] <= 3000, f"median message {sizes[N // 2]} B"
    failures = sum(is_failure(t) for t in trajectories)
    assert 0 < failures < N
    backlog, stream = trajectories[: N // 2], trajectories[N // 2 :]
    ends_backlog = produce(kafka_broker.bootstrap, topic, backlog)
    assert sum(ends_backlog.values()) == len(backlog), ends_backlog

    config = write_config(tmp_path, kafka_broker.bootstrap, topic, run)
    log = tmp_path / "daemon.log"
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")  # the daemon's own database
    sleeps = [round(rng.uniform(0.3, 2.0), 2) for _ in range(KILLS)]
    at_kill: list[int] = []
    daemon: DaemonProcess | None = None
    streamer = Streamer(kafka_broker.bootstrap, topic, stream, start=len(backlog), over_s=STREAM_S)
    try:
        for i, pause in enumerate(sleeps):
            daemon = DaemonProcess(config, log)
            daemon.wait_started()
            if i == 0:
                streamer.start()
            time.sleep(pause)
            daemon.kill()
            at_kill.append(store.trajectory_count())
        daemon = DaemonProcess(config, log)
        daemon.wait_started()
        ends = streamer.result(60)
        wait_for(lambda: store.trajectory_count() >= N, 60, f"{N} stored trajectories")
        daemon.process.send_signal(signal.SIGTERM)
        try:
            code = daemon.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the daemon did not drain within 30 s of SIGTERM:\n{daemon.tail()}")
        assert code == 0, daemon.tail()

        print(
            f"\nSIGKILL after {sleeps} s; stored at each kill (of {N}): {at_kill}; "
            f"message sizes {sizes[0]}-{sizes[-1]} B, median {sizes[N // 2]} B"
        )
        assert sum(ends.values()) == N, ends  # offsets count from the topic's start
        assert store.trajectory_count() == N
        assert sum(b.size for b in store.open_buffers()) == failures
        assert stored_positions(store, topic) == ends
        assert sum(stored_positions(store, topic).values()) == N
        mid_way = [count for count in at_kill if count < N]
        assert len(mid_way) >= 2, (
            f"only {len(mid_way)} kills while ingest was unfinished: {at_kill}"
        )
    finally:
        if daemon is not None and daemon.process.poll() is None:
            daemon.kill()
        store.close()


# --- 2. broker restart on durable storage ---------------------------------------------------


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    """A moto S3 server on a free loopback port with the bucket `tansu`."""
    pytest.importorskip("moto", reason="moto[server] (the dev extra) runs the S3 tansu stores to")
    boto3 = pytest.importorskip("boto3")
    moto_server = Path(sys.executable).parent / "moto_server"
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with (tmp_path / "moto.log").open("ab") as out:
        server = subprocess.Popen(
            [str(moto_server), "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _listening(port), 30, f"moto_server on port {port}")
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        )
        s3.create_bucket(Bucket="tansu")
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def test_broker_restart_on_durable_storage_neither_crashes_nor_reingests(
    tmp_path: Path, s3_endpoint: str
) -> None:
    aws = {
        "AWS_ENDPOINT": s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    run = uuid.uuid4().hex[:8]
    topic = f"restart-{run}"
    rng = random.Random(7)
    trajectories = [synthetic_trajectory(i, rng) for i in range(N)]
    first, second = trajectories[: N // 2], trajectories[N // 2 :]
    with EmbeddedBroker(storage_engine="s3://tansu/", extra_env=aws) as broker:
        ensure_topics(KafkaSettings(bootstrap=broker.bootstrap), [topic], partitions=PARTITIONS)
        settings = Settings(
            cache=tmp_path / "cache",
            state_url=f"sqlite:///{tmp_path / 'state.db'}",
            kafka_bootstrap=broker.bootstrap,
            trajectory_topic=topic,
            release_topic=f"rel-{run}",
            control_topic=f"ctl-{run}",
            kafka=KafkaOptions(
                group_id=GROUP,
                dead_letter_topic=f"dlq-{run}",
                events_topic=f"events-{run}",
                poll_timeout_ms=200,
            ),
            loop=LoopOptions(batch_size=NEVER_BATCH, batch_window_s=NEVER_WINDOW_S),
            metrics=MetricsOptions(port=0),
        )
        built = build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex)
        daemon, store = built.daemon, built.daemon.store
        daemon.start()
        try:
            ends_first = produce(broker.bootstrap, topic, first)
            wait_for(lambda: store.trajectory_count() == N // 2, 60, "the first half stored")
            assert daemon.ready() == (True, "ready")

            broker.stop()
            stopped_at = time.monotonic()
            time.sleep(2)
            wait_for(lambda: not daemon.ready()[0], 30, "the daemon to notice the broker left")
            noticed_s = time.monotonic() - stopped_at
            _, reason = daemon.ready()
            assert reason.startswith("broker unreachable"), reason
            ingest = [t for t in daemon._threads if t.name == "ingest"]
            assert ingest and ingest[0].is_alive(), "the ingest thread died"
            assert not daemon.stopping
            assert store.trajectory_count() == N // 2

            broker.start()
            restarted_at = time.monotonic()
            ends_second = produce(broker.bootstrap, topic, second, start=N // 2)
            wait_for(lambda: store.trajectory_count() >= N, 60, "the second half stored")
            caught_up_s = time.monotonic() - restarted_at
            wait_for(lambda: daemon.ready()[0], 30, "the daemon to be ready again")
            print(
                f"\nbroker down: unreachable reported {noticed_s:.1f} s after the stop "
                f"({reason[:120]!r}); second half stored {caught_up_s:.1f} s after the restart"
            )
            time.sleep(1.5)  # anything re-read would have arrived by now
            assert store.trajectory_count() == N
            positions = stored_positions(store, topic)
            assert sum(positions.values()) == N, (positions, ends_first, ends_second)
            assert positions == ends_second
            duplicates = built.registry.get_sample_value("harness_r1_trajectories_duplicate_total")
            assert duplicates == 0, f"{duplicates} records were read twice after the restart"
            failures = sum(is_failure(t) for t in trajectories)
            assert sum(b.size for b in store.open_buffers()) == failures
        finally:
            daemon.stop()
            built.close()
