"""The topics a deployment needs and the settings recommended for each, derived from the
daemon's settings (names, the trajectory size limit).

Why these values:
- trajectories: several partitions (agents' records spread by key; ingest reads them all),
  kept 7 days so a lost state store can be rebuilt by replay, and a message size limit twice
  the daemon's `kafka.max_record_bytes`, so an oversized trajectory still reaches the daemon
  and is dead-lettered with its reason instead of bouncing off the broker at the producer.
- overlay releases and control commands: exactly one partition (every reader needs one order;
  seq numbers are checked against it) and kept forever (agents that start late replay them;
  both are a few KB per event).
- dead letters: one partition, kept 30 days to inspect and re-drive; room for the original
  record plus the reason.
- loop events: one partition, kept 7 days.
With replication 3 or more, `min.insync.replicas` 2: an acknowledged record survives a broker.
"""

from __future__ import annotations

from harness_r1.consumers import TopicSpec
from harness_r1.daemon.settings import Settings

DAY_MS = 24 * 3600 * 1000
FOREVER = "-1"
DEFAULT_TRAJECTORY_PARTITIONS = 6


def recommended_topics(
    settings: Settings,
    *,
    replication_factor: int = -1,
    trajectory_partitions: int = DEFAULT_TRAJECTORY_PARTITIONS,
) -> list[TopicSpec]:
    """Every topic the daemon, the canary workers and the agents use, with its settings."""
    if trajectory_partitions < 1:
        raise ValueError(f"trajectory_partitions must be >= 1, got {trajectory_partitions}")
    record = settings.kafka.max_record_bytes
    common = {"cleanup.policy": "delete", "compression.type": "producer"}
    if replication_factor >= 3:
        common["min.insync.replicas"] = "2"

    def spec(name: str, partitions: int, why: str, **configs: str) -> TopicSpec:
        merged = {**common, **{key.replace("_", "."): value for key, value in configs.items()}}
        return TopicSpec(name, partitions, replication_factor, merged, why)

    return [
        spec(
            settings.trajectory_topic,
            trajectory_partitions,
            "agents' trajectories, read by the ingesting daemon",
            retention_ms=str(7 * DAY_MS),
            max_message_bytes=str(2 * record),
        ),
        spec(
            settings.release_topic,
            1,
            "signed overlay releases, read by every agent in one order",
            retention_ms=FOREVER,
            max_message_bytes=str(1024 * 1024),
        ),
        spec(
            settings.control_topic,
            1,
            "signed control commands (rollback, pause), read by every agent in one order",
            retention_ms=FOREVER,
            max_message_bytes=str(1024 * 1024),
        ),
        spec(
            settings.kafka.dead_letter_topic,
            1,
            "records the daemon could not take, with the reason",
            retention_ms=str(30 * DAY_MS),
            max_message_bytes=str(2 * record + 64 * 1024),
        ),
        spec(
            settings.kafka.events_topic,
            1,
            "loop events (packets, candidates, gate decisions) for other consumers",
            retention_ms=str(7 * DAY_MS),
            max_message_bytes=str(1024 * 1024),
        ),
    ]
