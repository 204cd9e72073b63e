"""Records as read, and the "topic:partition" position keys a reader resumes from.

Why a module of its own: these are the values the reader, its log-reset handling and its
callers share (the daemon hands records on and stores positions; the overlay client persists
them), and none of them needs a reader to use them; the position keys are the format a caller
persists, so they are defined in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka import TopicPartition


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
