"""Consumers: turning trajectories into work, and the Kafka plumbing for it. The deterministic
failure-packet extractor (packets.py, signals.py, constraints.py); the small Kafka helpers
(kafka_client.py: settings and clients; producer.py; topic_setup.py; broadcast_reader.py: a
reader over every partition with positions the caller persists, records.py its records and
position keys, log_resets.py what a log reset under them means) and the embedded
Kafka-protocol broker for demos and tests (broker.py).

Modules:
- broadcast_reader.py: The broadcast reader: every partition of its topics, no consumer group,
  positions that the caller persists; and one-partition questions about a log (its start, its
  end) asked through it
- broker.py: An embedded Kafka-protocol broker (tansu) for the demo and the tests
- constraints.py: What a task requires (constraints) and how ids are masked, for failure packets
- failure_modes.py: What an agent's failures look like: each failed episode's main failure mode,
  from the same signals its failure packet counts ...
- kafka_client.py: Kafka client settings and construction: where the broker is, how long any
  call may block, and the kafka-python clients built from that
- log_resets.py: How a BroadcastReader meets a log the broker reset under its positions: holding
  the partition, or reading it again from its start, and reading on past records retention
  deleted
- packets.py: The deterministic failure-packet extractor: a batch of trajectories -> one
  FailurePacket
- producer.py: Producing records: a producer of bytes keys and values, and a publish that waits
  for the broker's acknowledgement
- records.py: Records as read, and the "topic:partition" position keys a reader resumes from
- security.py: Kafka client security settings (TLS, SASL), kept apart from the clients
  themselves so that reading settings does not import kafka-python ...
- signals.py: Runtime signals of an episode, derived from its Trajectory alone (deterministic,
  no env needed)
- topic_setup.py: Topic setup for clients: `ensure_topics` creates the topics that are missing
  and waits until each has a leader for every partition; topic names are checked here
- topics.py: Topic provisioning for operators: create topics with chosen partitions, replication
  and configs, and describe what a cluster has, ...
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.consumers.broadcast_reader import (
        BroadcastReader,
        partition_end,
        partition_start,
    )
    from harness_r1.consumers.broker import EmbeddedBroker
    from harness_r1.consumers.failure_modes import MODES, count_failure_modes
    from harness_r1.consumers.kafka_client import (
        KafkaSettings,
        KafkaUnavailableError,
        is_unavailable,
    )
    from harness_r1.consumers.packets import (
        NoFailures,
        PacketConfig,
        batch_key,
        build_packet,
        build_packet_from_jsonl,
        is_failure,
        read_trajectories,
        select_order,
    )
    from harness_r1.consumers.producer import PublishError, make_producer, publish
    from harness_r1.consumers.records import Record, split_position_key
    from harness_r1.consumers.security import KafkaSecurity
    from harness_r1.consumers.topic_setup import ensure_topics
    from harness_r1.consumers.topics import (
        TopicSpec,
        TopicState,
        create_topics,
        describe_topics,
        differences,
    )

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "BroadcastReader",
    "EmbeddedBroker",
    "KafkaSecurity",
    "KafkaSettings",
    "KafkaUnavailableError",
    "MODES",
    "NoFailures",
    "PacketConfig",
    "PublishError",
    "Record",
    "TopicSpec",
    "TopicState",
    "batch_key",
    "build_packet",
    "build_packet_from_jsonl",
    "create_topics",
    "describe_topics",
    "differences",
    "ensure_topics",
    "count_failure_modes",
    "is_failure",
    "is_unavailable",
    "make_producer",
    "partition_end",
    "partition_start",
    "publish",
    "read_trajectories",
    "select_order",
    "split_position_key",
]
