"""Producing records: a producer of bytes keys and values, and a publish that waits for the
broker's acknowledgement.

Why a module of its own: sending is what the agent-side overlay client, the daemon and the
CLI's publish commands share without reading anything; the delivery choices (acks from all
in-sync replicas, no idempotence, one request in flight, no topic auto-creation) are made
here once, and a publish that was not acknowledged is a `PublishError` from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from harness_r1.consumers.kafka_client import (
    DEFAULT_SEND_TIMEOUT_S,
    KafkaSettings,
    _client_config,
    _unavailable,
)

PRODUCER_RETRIES = 5


class PublishError(RuntimeError):
    """A record was not acknowledged by the broker in time (it may still arrive later)."""


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
