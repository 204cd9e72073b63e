"""`harness-r1 broker`: a local broker for a trial, in the foreground; SIGTERM ends it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness_r1.consumers.broker import free_port, metadata_probe

pytestmark = pytest.mark.integration


def test_the_broker_command_serves_kafka_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    script = Path(sys.executable).parent / "harness-r1"
    process = subprocess.Popen(
        [str(script), "broker", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert f"broker on 127.0.0.1:{port}" in line, line
        deadline = time.monotonic() + 30
        while not metadata_probe("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert metadata_probe("127.0.0.1", port)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert not metadata_probe("127.0.0.1", port)  # the broker went with it
    finally:
        if process.poll() is None:
            process.kill()
