"""Kafka client settings and construction: where the broker is, how long any call may block,
and the kafka-python clients built from that.

Built on kafka-python (3.0.x) with plain bytes in and out: callers own their encoding, so one
producer carries JSON, signed overlays or anything else, and nothing is decoded twice.

Timeouts: kafka-python's blocking calls can wait a long time while a broker is away (seen: 12 s
with no error), so every client here is built with bounded bootstrap, request, delivery and
block times taken from `KafkaSettings`, and every wait passes an explicit timeout.

Why a module of its own: it is the one adapter from our settings to kafka-python's client
configuration (bootstrap, timeouts, reconnects, security) and builds the clients that clean up
after a failed start; the producer (producer.py), topic setup (topic_setup.py, topics.py) and
the reader (broadcast_reader.py) all build theirs from it, so a client change stays here. The
error of a broker out of reach (`KafkaUnavailableError`, `is_unavailable`) is named here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from harness_r1.consumers.security import (
    KafkaSecurity,
    is_loopback,
)

DEFAULT_SEND_TIMEOUT_S = 10.0
# Reconnect quickly after a broker restart: kafka-python's default backoff grows to 30 s.
RECONNECT_BACKOFF_MAX_MS = 1_000


class KafkaUnavailableError(RuntimeError):
    """The broker could not be reached within the configured timeouts."""


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is and how long any call may block.

    bootstrap: "host:port[,host:port...]". request_timeout_ms bounds each request and the
    initial connection; poll_timeout_ms is BroadcastReader.poll's default wait; send_timeout_s
    bounds a publish (blocking for metadata, retries and the acknowledgement).
    fetch_max_wait_ms is how long the broker may hold a fetch open when nothing is new; tansu
    answers a held fetch only when the wait ends, so it is also the worst-case delivery delay
    of a message that arrives meanwhile (kafka-python's default of 500 ms made a release take
    ~255 ms to reach a fleet; 100 ms: see BENCHMARKS.md).
    """

    bootstrap: str
    client_id: str = "harness-r1"
    request_timeout_ms: int = 10_000
    poll_timeout_ms: int = 200
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    fetch_max_wait_ms: int = 100
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def __post_init__(self) -> None:
        servers = self.bootstrap_servers
        if not servers:
            raise ValueError(
                "KafkaSettings.bootstrap is empty: give 'host:port' (several comma-separated), "
                "e.g. '127.0.0.1:9092' or EmbeddedBroker().bootstrap"
            )
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(
                    f"KafkaSettings.bootstrap entry {server!r} is not 'host:port' with a port in "
                    "1..65535, e.g. '127.0.0.1:9092'"
                )
        if not self.client_id.strip():
            raise ValueError("KafkaSettings.client_id is empty: give a name, e.g. 'harness-r1'")
        if not 0 <= self.fetch_max_wait_ms < self.request_timeout_ms:
            raise ValueError(
                f"KafkaSettings.request_timeout_ms={self.request_timeout_ms} must be above "
                f"fetch_max_wait_ms={self.fetch_max_wait_ms} (kafka-python requires it); "
                "10000 and 100 are good values"
            )
        if self.poll_timeout_ms < 0:
            raise ValueError(
                f"KafkaSettings.poll_timeout_ms={self.poll_timeout_ms} must be >= 0 (0 = no wait)"
            )
        if self.send_timeout_s * 1000 < self.request_timeout_ms:
            raise ValueError(
                f"KafkaSettings.send_timeout_s={self.send_timeout_s} must allow at least one "
                f"request: make it >= request_timeout_ms/1000 = {self.request_timeout_ms / 1000}"
            )

    @property
    def bootstrap_servers(self) -> list[str]:
        return [part.strip() for part in self.bootstrap.split(",") if part.strip()]

    def plaintext_warning(self) -> str | None:
        """Why this setup sends data in the clear to another host, or None: unencrypted
        traffic on loopback (the embedded broker, a local proxy) is fine, elsewhere it
        carries trajectories and signed releases readable by anyone on the path."""
        if self.security.uses_tls:
            return None
        remote = [s for s in self.bootstrap_servers if not is_loopback(s.rpartition(":")[0])]
        if not remote:
            return None
        return (
            f"Kafka traffic to {', '.join(remote)} is unencrypted ({self.security.protocol}); "
            "set kafka.security_protocol to SSL or SASL_SSL for brokers off this host"
        )


def _client_config(settings: KafkaSettings) -> dict[str, Any]:
    """What every client shares: bounded bootstrap and requests, quick reconnects, and the
    security setup (TLS, SASL)."""
    return {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": settings.client_id,
        "request_timeout_ms": settings.request_timeout_ms,
        "bootstrap_timeout_ms": settings.request_timeout_ms,
        "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
        **settings.security.client_config(),
    }


def client_config(settings: KafkaSettings) -> dict[str, Any]:
    """The configuration every kafka-python client built here gets (for inspection)."""
    return _client_config(settings)


def _release_partial(client: Any) -> None:
    """Close what a kafka-python client started before its constructor failed.

    KafkaConsumer and KafkaAdminClient start an IO thread before they bootstrap; when the
    bootstrap times out the constructor raises and the thread is left running, one per failed
    attempt (checked with kafka-python 3.0.12). A reader retrying while the broker is away would
    pile them up.
    """
    inner = getattr(client, "_client", None)
    if inner is not None:
        with contextlib.suppress(Exception):
            inner.close()
    net = getattr(client, "_net", None)
    if net is not None:
        with contextlib.suppress(Exception):
            net.stop()


class _Consumer(KafkaConsumer):  # type: ignore[misc,unused-ignore]
    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            _release_partial(self)
            raise


class _Admin(KafkaAdminClient):  # type: ignore[misc,unused-ignore]
    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            _release_partial(self)
            raise


@contextlib.contextmanager
def admin_client(settings: KafkaSettings, what: str = "admin") -> Iterator[Any]:
    """A KafkaAdminClient built like every other client here, closed on the way out; raises
    KafkaUnavailableError when the broker does not answer (for topics.py)."""
    try:
        admin = _Admin(**_client_config(settings))
    except KafkaError as exc:
        raise _unavailable(settings, what, exc) from exc
    try:
        yield admin
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def _unavailable(settings: KafkaSettings, what: str, exc: BaseException) -> KafkaUnavailableError:
    return KafkaUnavailableError(
        f"{what}: cannot reach Kafka at {settings.bootstrap} within "
        f"{settings.request_timeout_ms} ms ({type(exc).__name__}: {exc}); is the broker running "
        "and is bootstrap its advertised address?"
    )


_UNAVAILABLE = (KafkaTimeoutError, KafkaConnectionError, OSError)


def is_unavailable(err: BaseException) -> bool:
    """Whether a failed publish or request means the broker is away (timeouts, connection
    errors), as opposed to the broker refusing this particular record (its size, a policy)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, (*_UNAVAILABLE, KafkaUnavailableError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
