"""Consumers: turning trajectories into work, and the Kafka plumbing for it. The deterministic
failure-packet extractor (packets.py, signals.py, constraints.py); the small Kafka helpers
(kafka.py: producer, topic setup, a broadcast reader over every partition with positions the
caller persists) and the embedded Kafka-protocol broker for demos and tests (broker.py).

Modules:
- broker.py: An embedded Kafka-protocol broker (tansu) for the demo and the tests
- constraints.py: What a task requires (constraints) and how ids are masked, for failure packets
- failure_modes.py: What an agent's failures look like: each failed episode's main failure mode,
  from the same signals its failure packet counts ...
- kafka.py: Small Kafka helpers shared by the agent-side overlay client (deploy) and the daemon
- packets.py: The deterministic failure-packet extractor: a batch of trajectories -> one
  FailurePacket
- security.py: Kafka client security settings (TLS, SASL), kept apart from the clients
  themselves so that reading settings does not import kafka-python ...
- signals.py: Runtime signals of an episode, derived from its Trajectory alone (deterministic,
  no env needed)
- topics.py: Topic provisioning for operators: create topics with chosen partitions, replication
  and configs, and describe what a cluster has, ...
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.consumers.broker import EmbeddedBroker
    from harness_r1.consumers.failure_modes import MODES, count_failure_modes
    from harness_r1.consumers.kafka import (
        BroadcastReader,
        KafkaSettings,
        KafkaUnavailableError,
        PublishError,
        Record,
        ensure_topics,
        is_unavailable,
        make_producer,
        partition_end,
        partition_start,
        publish,
        split_position_key,
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
    from harness_r1.consumers.security import KafkaSecurity
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
