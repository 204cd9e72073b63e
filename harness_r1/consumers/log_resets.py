"""How a BroadcastReader meets a log the broker reset under its positions: holding the
partition, or reading it again from its start, and reading on past records retention deleted.

A log is reset when a position is past its end or the topic is recreated under a new id or gone
and back (a broker that lost its data, a restore): the positions mean nothing in the new log.
By default such a partition is read again from its start (a record may be read twice, never
skipped); with `hold_when_reset` it is held (`held`) for the caller to decide. A position below
the log's start (retention deleted records before they were read) reads on from the start and
is counted in `retention_skipped`.

Why a module of its own: what a reset log means for a stored position is a decision of its
own, apart from the reading itself (assignment, poll, offsets: broadcast_reader.py). It is a
mixin, `LogResets`, that BroadcastReader inherits: its methods work on the reader's state, set
up in BroadcastReader's `__init__`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka import TopicPartition

from harness_r1.consumers.records import position_key, split_position_key

_log = logging.getLogger(__name__)


class LogResets:
    """BroadcastReader's handling of reset logs (see the module docstring); the attributes
    below are the reader's, declared here for the methods that read them."""

    _consumer: Any
    _topics: tuple[str, ...]
    _assigned: frozenset[TopicPartition]
    _next: dict[TopicPartition, int]
    _hold_when_reset: bool
    _lost: set[str]
    _held: dict[TopicPartition, str]
    _topic_ids: dict[str, Any]
    retention_skipped: dict[str, int]
    missing_topics: tuple[str, ...]

    if TYPE_CHECKING:  # BroadcastReader's offset queries

        def start_offsets(self, timeout_ms: int | None = None) -> dict[str, int]: ...

        def fetched_ends(self) -> dict[str, int]: ...

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

    def adopt(self, other: LogResets, held: Mapping[str, str]) -> None:
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
