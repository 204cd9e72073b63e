"""`harness-r1 ingest skip|reset`: move the daemon's ingest past records it cannot get past, or
set it back where the broker reset a partition's log under it.

Every record the daemon can read ends in the store or on the dead-letter topic, so nothing a
producer sends can hold a partition. What can is below the records: a batch the Kafka client
cannot decode at all (a codec it lacks, a corrupt batch). For that an operator names the next
offset to read; the order goes out as a signed, seq-numbered, expiring control command (target
`ingest:<consumer group>`, which agents ignore as not theirs), the daemon's control follower
verifies it like any command, moves the stored position forward (never back), restarts ingest
from there, and records who skipped what and why in its log and on the events topic.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Annotated

import typer

from harness_r1.cli.group import command_group

ingest_app = command_group("The daemon's trajectory ingest.")


@ingest_app.command("skip")
def ingest_skip(
    partition: Annotated[int, typer.Option(min=0, help="Partition of the trajectory topic.")],
    offset: Annotated[int, typer.Option(min=0, help="Next offset to read (forward only).")],
    reason: Annotated[str, typer.Option(help="Why (recorded with the command).")],
    topic: Annotated[
        str | None, typer.Option(help="Topic (default: the trajectory topic).")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Who acts (default: $USER).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", exists=True, help="Daemon settings (YAML).")
    ] = None,
) -> None:
    """Order the daemons of this consumer group to read PARTITION from OFFSET on.

    Example: `harness-r1 ingest skip --partition 2 --offset 1734 --reason "undecodable batch"`
    """
    from harness_r1.cli.settings import cli_settings
    from harness_r1.consumers import partition_end

    settings = cli_settings(config)
    kafka = settings.kafka_client("harness-r1-cli")
    topic = topic or settings.trajectory_topic
    if topic != settings.trajectory_topic:
        raise typer.BadParameter(
            f"the daemon ingests {settings.trajectory_topic!r}, not {topic!r}", param_hint="--topic"
        )
    end = partition_end(kafka, topic, partition)
    if end is None or offset > end:
        raise typer.BadParameter(
            f"{topic}:{partition} ends at offset {end}; a skip past the end would make the "
            "daemon re-read the partition from its start",
            param_hint="--offset",
        )
    command = _publish(settings, "skip", topic, partition, offset, actor, reason)
    typer.echo(
        f"published skip_offset seq {command.seq} for {command.target}: "
        f"{command.topic}:{command.partition} from offset {command.offset}"
    )


@ingest_app.command("reset")
def ingest_reset(
    partition: Annotated[int, typer.Option(min=0, help="Partition of the trajectory topic.")],
    to: Annotated[str, typer.Option(help="earliest (the log's start) or latest (its end).")],
    reason: Annotated[str, typer.Option(help="Why (recorded with the command).")],
    actor: Annotated[str | None, typer.Option(help="Who acts (default: $USER).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", exists=True, help="Daemon settings (YAML).")
    ] = None,
) -> None:
    """Order the daemons of this consumer group to read PARTITION again from its log's start
    (earliest: every record the log holds, copies already stored dropped) or from its end
    (latest: what the log holds now is given up): the answer to a partition the daemon holds
    because the broker reset its log (a recreated topic, a restored broker; /readyz names it).

    Example: `harness-r1 ingest reset --partition 0 --to earliest --reason "topic recreated"`
    """
    from harness_r1.cli.settings import cli_settings
    from harness_r1.consumers import partition_end, partition_start

    if to not in ("earliest", "latest"):
        raise typer.BadParameter("earliest or latest", param_hint="--to")
    settings = cli_settings(config)
    kafka = settings.kafka_client("harness-r1-cli")
    topic = settings.trajectory_topic
    find = partition_start if to == "earliest" else partition_end
    offset = find(kafka, topic, partition)
    if offset is None:
        raise typer.BadParameter(
            f"{topic}:{partition}: the broker did not answer (or has no such partition)",
            param_hint="--partition",
        )
    command = _publish(settings, "reset", topic, partition, offset, actor, reason)
    typer.echo(
        f"published reset_offset seq {command.seq} for {command.target}: "
        f"{command.topic}:{command.partition} from offset {command.offset} ({to})"
    )


def _publish(  # type: ignore[no-untyped-def]
    settings, kind: str, topic: str, partition: int, offset: int, actor: str | None, reason: str
):
    """A signed skip_offset or reset_offset for this daemon's consumer group."""
    from harness_r1.consumers import ensure_topics, make_producer, publish
    from harness_r1.deploy import OverlayRegistry, Publisher, PublisherConfig, Signer

    kafka = settings.kafka_client("harness-r1-cli")
    ensure_topics(kafka, [settings.control_topic])
    producer = make_producer(kafka)

    def send(topic_: str, value: bytes, key: bytes | None) -> None:
        publish(producer, topic_, value, key=key, timeout_s=kafka.send_timeout_s)

    publisher = Publisher(
        OverlayRegistry(settings.registry_url()),
        Signer.from_file(settings.require_signing_key()),
        send,
        PublisherConfig(release_topic=settings.release_topic, control_topic=settings.control_topic),
    )
    method = publisher.skip_offset if kind == "skip" else publisher.reset_offset
    try:
        return method(
            settings.kafka.group_id,
            topic,
            partition,
            offset,
            actor=actor or os.environ.get("USER") or getpass.getuser(),
            reason=reason,
        )
    finally:
        producer.close(timeout=5)
