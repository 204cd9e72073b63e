"""Shared fixtures. `kafka_broker`: one embedded tansu broker (a real Kafka-protocol broker,
see harness_r1/consumers/broker.py) for the whole session, started only by tests that ask for it;
tests keep apart by using their own topic names. `pg_url`: a PostgreSQL database of this test
process's own on the local server, so processes running at once cannot drop each other's
tables. `start_prometheus`: a real Prometheus server (Debian's) with a config the test writes,
stopped at the end of the test; the test skips, saying why, where none is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from harness_r1.consumers.broker import EmbeddedBroker, free_port


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after pytest's short summary
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """The last lines of `make test` (before pytest's count): the tests skipped for a missing
    tool, and the command that installs it (tests/skipped_tools.py)."""
    from skipped_tools import missing_packages, summary

    yield
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reasons.append(str(longrepr[2]))
    for line in summary(missing_packages(reasons)):
        terminalreporter.write_line(line, yellow=True, bold=True)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """`start(config_yaml)` writes the config (rule files it names go beside it, in
    `tmp_path`) and starts Prometheus on a free port; returns its base URL. Not waited for:
    callers poll the API, which refuses connections until the server listens."""
    binary = shutil.which("prometheus")
    servers: list[subprocess.Popen[bytes]] = []

    def start(config: str) -> str:
        if binary is None:
            pytest.skip("prometheus not installed (Debian package prometheus)")
        path = tmp_path / "prometheus.yml"
        path.write_text(config)
        port = free_port()
        servers.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={path}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / "prometheus.log").open("wb"),
            )
        )
        return f"http://127.0.0.1:{port}"

    try:
        yield start
    finally:
        for server in servers:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


#: The local PostgreSQL (trust auth); the tests make their own databases on it.
PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database named after this process, dropped at the end of the session.

    Why not the shared `test` database: `make mutate` runs two test processes at once, and one
    process dropping the daemon tables under the other made tests fail for reasons that had
    nothing to do with the mutant (an equivalent mutant of ingest.py counted as killed).
    Skips, saying why, where no server answers."""
    admin = create_engine(
        PG_SERVER, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 2}
    )
    name = f"harness_r1_test_{os.getpid()}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as err:  # any failure to connect means "no server here"
        admin.dispose()
        pytest.skip(f"no PostgreSQL answering at {PG_SERVER}: {type(err).__name__}: {err}")
    try:
        yield PG_SERVER.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
