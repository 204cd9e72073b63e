"""Dead letters: a record that cannot become a stored trajectory, kept with why and where from.

Every consumed record ends in exactly one place: the store, or the dead-letter topic. Exactly
once on the topic is reached with an outbox, not by publishing from the poll loop: the dead
letter is written into the state store in the SAME transaction that moves the consumer past
its record (`StateStore.ingest`), and published from there afterwards (`DeadLetterOutbox`);
its row is marked published once the broker acknowledged it and kept until retention, so the
same record read again later finds its letter there and is not published again. So a store
transaction that is retried never publishes twice, and a broker that is away delays dead
letters instead of wedging ingestion. The one window left (a crash after the broker's ack and
before the row is marked) publishes a copy with the same `dead_letter_id` header, the dedup key
a reader of the topic can use.

What a dead letter carries (header names are part of the operator contract):
- the original key and timestamp (as the record's own key and timestamp), and the original
  headers, each renamed `original.<name>` so they cannot be mistaken for ours;
- `reason` ("code: detail", at most 500 characters) and `reason_code`, one of `REASON_CODES`
  (a bounded set: it is also the metric label);
- `source_topic`, `source_partition`, `source_offset`, `source_timestamp_ms`;
- `original_size` (bytes of the value as consumed) and `truncated` ("1" when the value was cut
  to `max_value_bytes` so that it fits under the producer's request size);
- `dead_letter_id`: "<group>/<topic>/<partition>/<offset>", unique per consumed record.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import structlog

from harness_r1.consumers import Record, is_unavailable

log = structlog.get_logger(__name__)

MAX_REASON_CHARS = 500
#: The dead-letter value is cut to this many bytes: a producer request is 1 MiB at most
#: (kafka-python's and Kafka's default), and headers ride in the same request.
DEFAULT_MAX_VALUE_BYTES = 512 * 1024
#: Original key and headers beyond these sizes are cut too (keys) or dropped (headers).
MAX_KEY_BYTES = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
ORIGINAL_PREFIX = "original."
#: The one header a dead letter keeps when the original ones were too large to carry.
HEADERS_DROPPED = "harness_r1.headers_dropped"


class ReasonCode(StrEnum):
    """Why a record was dead-lettered: the bounded label set of the dead-letter metric."""

    NOT_JSON = "not_json"  # not UTF-8 JSON (binary, truncated, a BOM, ...)
    INVALID = "invalid"  # JSON, but not a valid Trajectory (types, NaN, missing fields, ...)
    UNSUPPORTED_VERSION = "unsupported_version"  # a schema major this daemon does not read
    UNSTORABLE = "unstorable"  # valid, but the store refused it (sizes, NUL, encoding)
    EMPTY = "empty"  # a null value (tombstone) or an empty one
    TOO_LARGE = "too_large"  # over the configured size of a trajectory


REASON_CODES: tuple[str, ...] = tuple(code.value for code in ReasonCode)


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter as the outbox stores and publishes it."""

    group: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]  # the original headers, as consumed
    value: bytes  # possibly truncated
    original_size: int
    reason_code: ReasonCode
    detail: str

    @property
    def dead_letter_id(self) -> str:
        return f"{self.group}/{self.topic}/{self.partition}/{self.offset}"

    @property
    def truncated(self) -> bool:
        """The value was cut, or the original headers dropped: not the whole record."""
        dropped = any(name == HEADERS_DROPPED for name, _ in self.headers)
        return len(self.value) < self.original_size or dropped

    @property
    def reason(self) -> str:
        return f"{self.reason_code.value}: {self.detail}"[:MAX_REASON_CHARS]

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        ours = [
            ("reason", self.reason.encode("utf-8", "replace")),
            ("reason_code", self.reason_code.value.encode()),
            ("source_topic", self.topic.encode()),
            ("source_partition", str(self.partition).encode()),
            ("source_offset", str(self.offset).encode()),
            ("source_timestamp_ms", str(self.timestamp_ms).encode()),
            ("original_size", str(self.original_size).encode()),
            ("truncated", b"1" if self.truncated else b"0"),
            ("dead_letter_id", self.dead_letter_id.encode()),
        ]
        return [(ORIGINAL_PREFIX + name, data) for name, data in self.headers] + ours

    def headers_json(self) -> str:
        """The original headers as stored in the outbox (JSON of [name, base64])."""
        return json.dumps(
            [[name, base64.b64encode(data).decode("ascii")] for name, data in self.headers]
        )

    @staticmethod
    def headers_from_json(text: str) -> tuple[tuple[str, bytes], ...]:
        return tuple((str(name), base64.b64decode(data)) for name, data in json.loads(text))


def printable(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` safe for any database text column and any header: NULs and lone surrogates
    (which a record can smuggle into a validation message, e.g. as a JSON key) escaped."""
    escaped = text[: limit * 2].replace("\x00", "\\x00")
    return escaped.encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


def dead_letter(
    record: Record,
    group: str,
    code: ReasonCode,
    detail: str,
    *,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> DeadLetter:
    """The dead letter of `record`: value, key and headers cut to what one request can carry."""
    headers = record.headers
    if sum(len(name) + len(data) for name, data in headers) > MAX_HEADER_BYTES:
        note = f"{len(headers)} headers over {MAX_HEADER_BYTES} bytes".encode()
        headers = ((HEADERS_DROPPED, note),)
    key = record.key[:MAX_KEY_BYTES] if record.key is not None else None
    return DeadLetter(
        group=group,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        key=key,
        headers=headers,
        value=record.value[:max_value_bytes],
        original_size=len(record.value),
        reason_code=code,
        detail=printable(detail),
    )


def original_record_parts(
    headers: Sequence[tuple[str, bytes]],
) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """Split a dead letter's headers into the original ones (prefix removed) and ours."""
    original: list[tuple[str, bytes]] = []
    ours: dict[str, str] = {}
    for name, data in headers:
        if name.startswith(ORIGINAL_PREFIX):
            original.append((name[len(ORIGINAL_PREFIX) :], data))
        else:
            ours[name] = data.decode("utf-8", "replace")
    return original, ours


#: Failed publishes of one dead letter after which it goes out as a stub (headers, no value):
#: a letter the broker always refuses (its size limit, a policy) must not hold the others.
MAX_PUBLISH_ATTEMPTS = 5

#: (topic, value, key, headers, timestamp_ms) -> None; raises when the broker did not ack.
DeadLetterSend = Callable[[str, bytes, bytes | None, Sequence[tuple[str, bytes]], int], None]


class OutboxStore(Protocol):
    """What the outbox needs of the state store (StateStore provides it)."""

    def pending_dead_letters(self, group: str, limit: int) -> list[tuple[int, DeadLetter]]: ...
    def mark_dead_letters_published(self, row_ids: Sequence[int]) -> int: ...
    def count_pending_dead_letters(self) -> int: ...


@dataclass(frozen=True)
class DrainReport:
    sent: dict[str, int]  # by reason code
    pending: int  # rows left (a publish failed)
    error: str | None


class DeadLetterOutbox:
    """Publishes a consumer group's stored dead letters, oldest first, marking each published
    once acknowledged. One outbox per group and process (the ingest lock makes it so), which lets
    it skip the query while it knows the outbox is empty (`written` says when it is not)."""

    def __init__(self, store: OutboxStore, send: DeadLetterSend, topic: str, group: str) -> None:
        self._store = store
        self._send = send
        self.topic = topic
        self.group = group
        self._maybe_pending = True  # unknown at start: a crash may have left letters
        self._failures: dict[int, int] = {}  # row id -> failed publishes

    @property
    def maybe_pending(self) -> bool:
        return self._maybe_pending

    def written(self) -> None:
        """Dead letters were stored for this group: the next drain must look."""
        self._maybe_pending = True

    def drain(self, limit: int = 1_000) -> DrainReport:
        """Publish up to `limit` waiting dead letters; stop at the first failure (the rest
        stay stored, in order, for the next drain). Never raises for broker trouble."""
        if not self._maybe_pending:
            return DrainReport({}, 0, None)
        rows = self._store.pending_dead_letters(self.group, limit)
        sent: dict[str, int] = {}
        done: list[int] = []
        error = None
        for row_id, letter in rows:
            try:
                self._publish(row_id, letter)
            except Exception as err:  # noqa: BLE001 - the broker is away: retry on the next drain
                error = f"{type(err).__name__}: {err}"[:300]
                if not is_unavailable(err):  # refused for itself, not for a broker away
                    self._failures[row_id] = self._failures.get(row_id, 0) + 1
                break
            self._failures.pop(row_id, None)
            # Marked at once, not after the loop: a crash between the broker's ack and this
            # mark publishes that one letter again (same dead_letter_id), never a whole batch.
            self._store.mark_dead_letters_published([row_id])
            done.append(row_id)
            sent[letter.reason_code.value] = sent.get(letter.reason_code.value, 0) + 1
            log.warning(
                "trajectory_dead_lettered",
                reason=letter.reason[:200],
                topic=letter.topic,
                partition=letter.partition,
                offset=letter.offset,
            )
        return self._report(sent, rows, done, limit, error)

    def _publish(self, row_id: int, letter: DeadLetter) -> None:
        headers = letter.kafka_headers()
        if self._failures.get(row_id, 0) < MAX_PUBLISH_ATTEMPTS:
            self._send(self.topic, letter.value, letter.key, headers, letter.timestamp_ms)
            return
        log.error("dead_letter_sent_as_stub", offset=letter.offset, attempts=MAX_PUBLISH_ATTEMPTS)
        ours = [(n, v) for n, v in headers if not n.startswith(ORIGINAL_PREFIX)]
        stub = [(n, b"1" if n == "truncated" else v) for n, v in ours]
        self._send(self.topic, b"", letter.key, [*stub, ("stub", b"1")], letter.timestamp_ms)

    def _report(
        self,
        sent: dict[str, int],
        rows: list[tuple[int, DeadLetter]],
        done: list[int],
        limit: int,
        error: str | None,
    ) -> DrainReport:
        left = len(rows) - len(done)
        self._maybe_pending = left > 0 or len(rows) == limit
        if len(rows) == limit:  # more may wait than one drain reads
            left = self._store.count_pending_dead_letters()
        return DrainReport(sent, left, error)
