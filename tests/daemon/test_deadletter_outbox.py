"""The dead-letter outbox's publishing policy, on a real SQLite store. The broker side is a
TEST DOUBLE (a send function): a broker that refuses one letter for its size cannot be set up
with the embedded tansu, and a broker that times out is what the poison tests run for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from harness_r1.consumers.producer import PublishError
from harness_r1.consumers.records import Record
from harness_r1.daemon.deadletter import (
    MAX_PUBLISH_ATTEMPTS,
    DeadLetterOutbox,
    ReasonCode,
    dead_letter,
)
from harness_r1.daemon.store import StateStore


class RefusingBroker:
    """TEST DOUBLE of a dead-letter topic: refuses values over `max_bytes` (as a broker's
    message.max.bytes does), or times out on everything while `away`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.away = False
        self.published: list[tuple[bytes, dict[str, bytes]]] = []

    def __call__(self, topic: str, value: bytes, key: Any, headers: Any, ts: int) -> None:
        if self.away:
            try:
                raise KafkaTimeoutError("no ack")
            except KafkaTimeoutError as err:
                raise PublishError("not acknowledged") from err
        if len(value) > self.max_bytes:
            try:
                raise MessageSizeTooLargeError(f"{len(value)} bytes")
            except MessageSizeTooLargeError as err:
                raise PublishError("refused") from err
        self.published.append((value, dict(headers)))


def letters(store: StateStore, values: list[bytes]) -> None:
    rows = [
        dead_letter(Record("t", 0, i, None, v, (("h", b"x"),), 1), "g", ReasonCode.NOT_JSON, "bad")
        for i, v in enumerate(values)
    ]
    store.ingest([], "g", {("t", 0): len(values)}, rows)


def test_a_letter_the_broker_always_refuses_goes_out_as_a_stub(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    broker = RefusingBroker(max_bytes=10)
    outbox = DeadLetterOutbox(store, broker, "dlq", "g")
    letters(store, [b"x" * 50, b"small"])
    for _ in range(MAX_PUBLISH_ATTEMPTS):
        report = outbox.drain()
        assert report.pending == 2 and report.error is not None
    report = outbox.drain()
    assert report.pending == 0 and report.sent == {"not_json": 2}
    (stub, headers), (value, _) = broker.published
    assert stub == b"" and headers["stub"] == b"1" and headers["truncated"] == b"1"
    assert headers["original_size"] == b"50" and "original.h" not in headers
    assert value == b"small"
    store.close()


def test_a_broker_that_is_away_never_turns_letters_into_stubs(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    broker = RefusingBroker(max_bytes=1_000)
    outbox = DeadLetterOutbox(store, broker, "dlq", "g")
    letters(store, [b"x" * 50])
    broker.away = True
    for _ in range(MAX_PUBLISH_ATTEMPTS * 2):
        assert outbox.drain().pending == 1
    broker.away = False
    assert outbox.drain().pending == 0
    assert broker.published[0][0] == b"x" * 50
    store.close()
