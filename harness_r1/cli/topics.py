"""`harness-r1 topics create|describe`: provision the deployment's topics with the recommended
partitions, replication and configs (daemon/topics.py says why each), and show what a cluster
has against those recommendations. Works against any Kafka; existing topics are never
altered, only reported. And `harness-r1 broker`: a local broker for a trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from harness_r1.cli.group import command_group

if TYPE_CHECKING:
    from harness_r1.consumers import KafkaSettings, TopicSpec, TopicState

topics_app = command_group("The deployment's Kafka topics: create them, describe them.")
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Daemon settings file (YAML).", exists=True)
]
ReplicationOption = Annotated[
    int,
    typer.Option(
        help="Replicas per partition (-1: the broker's default). Production: 3, which also "
        "sets min.insync.replicas=2."
    ),
]
PartitionsOption = Annotated[
    int, typer.Option(min=1, help="Partitions of the trajectory topic (the others have one).")
]


def _topics(
    config: Path | None, replication: int, partitions: int
) -> tuple[list[TopicSpec], KafkaSettings]:
    """The recommended topics and the Kafka client settings, from one read of the settings."""
    from harness_r1.cli.settings import cli_settings
    from harness_r1.daemon import recommended_topics

    settings = cli_settings(config)
    specs = recommended_topics(
        settings, replication_factor=replication, trajectory_partitions=partitions
    )
    return specs, settings.kafka_client("harness-r1-cli")


@topics_app.command("create")
def topics_create(
    config: ConfigOption = None,
    replication_factor: ReplicationOption = -1,
    trajectory_partitions: PartitionsOption = 6,
    dry_run: Annotated[bool, typer.Option(help="Print the plan, create nothing.")] = False,
) -> None:
    """Create every missing topic with its recommended settings; existing ones are left as
    they are (differences are reported, and the command fails when one must be fixed).

    Example: `harness-r1 topics create --replication-factor 3`"""
    from harness_r1.consumers import create_topics, describe_topics, differences

    specs, kafka = _topics(config, replication_factor, trajectory_partitions)
    if dry_run:
        for spec in specs:
            typer.echo(json.dumps(_plan(spec)))
        return
    outcome = create_topics(kafka, specs)
    states = {state.name: state for state in describe_topics(kafka, [s.name for s in specs])}
    must_fix = False
    for spec in specs:
        found = differences(spec, states[spec.name])
        said = f" ({'; '.join(found)})" if found else ""
        typer.echo(f"{spec.name}: {outcome[spec.name]}{said}")
        must_fix = must_fix or any("must be" in item or "missing" in item for item in found)
    if must_fix:
        raise typer.Exit(1)


@topics_app.command("describe")
def topics_describe(
    config: ConfigOption = None,
    replication_factor: ReplicationOption = -1,
    trajectory_partitions: PartitionsOption = 6,
    as_json: Annotated[bool, typer.Option("--json", help="JSON Lines instead of a table.")] = False,
) -> None:
    """Each topic as the cluster has it (partitions, replicas, the configs the broker
    reports) beside the recommendation; exit 1 when a topic is missing.

    Example: `harness-r1 topics describe --json`"""
    from harness_r1.consumers import describe_topics, differences

    specs, kafka = _topics(config, replication_factor, trajectory_partitions)
    states = describe_topics(kafka, [spec.name for spec in specs])
    pairs = list(zip(specs, states, strict=True))
    if as_json:
        for spec, state in pairs:
            typer.echo(json.dumps(_described(spec, state)))
    else:
        table = Table("topic", "partitions", "replicas", "configs reported", "differences")
        for spec, state in pairs:
            configs = ", ".join(f"{k}={v}" for k, v in state.configs.items())
            table.add_row(
                spec.name,
                str(state.partitions) if state.exists else "-",
                str(state.replication_factor) if state.exists else "-",
                configs or "(none reported)",
                "; ".join(differences(spec, state)) or "ok",
            )
        Console(width=200).print(table)
    if not all(state.exists for state in states):
        raise typer.Exit(1)


def _described(spec: TopicSpec, state: TopicState) -> dict[str, object]:
    from harness_r1.consumers import differences

    return {
        "topic": spec.name,
        "exists": state.exists,
        "partitions": state.partitions,
        "replication_factor": state.replication_factor,
        "configs": dict(state.configs),
        "recommended": _plan(spec),
        "differences": differences(spec, state),
    }


def _plan(spec: TopicSpec) -> dict[str, object]:
    return {
        "topic": spec.name,
        "partitions": spec.partitions,
        "replication_factor": spec.replication_factor,
        "configs": dict(spec.configs),
        "why": spec.why,
    }


def broker_command(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 9092,
    storage: Annotated[
        str,
        typer.Option(
            help="tansu's storage engine URL: memory:// loses everything at exit; "
            "e.g. s3://bucket/ with the AWS_* variables, or postgres://... for a durable one."
        ),
    ] = "memory://tansu/",
) -> None:
    """A local Kafka-protocol broker for a trial (tansu, shipped with the package): runs in the
    foreground until Ctrl-C. Point `kafka_bootstrap` at 127.0.0.1:PORT, then `topics create`
    (one broker: `--replication-factor 1`).

    Example: `harness-r1 broker --port 9092`"""
    import signal
    import threading

    from harness_r1.consumers import EmbeddedBroker

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with EmbeddedBroker(port=port, storage_engine=storage) as broker:
        typer.echo(f"broker on {broker.bootstrap} ({storage}); Ctrl-C stops it")
        try:
            while not stop.wait(1.0) and broker.running:
                pass
        except KeyboardInterrupt:
            pass
        if not broker.running:
            typer.echo(f"the broker exited:\n{broker.log_tail()}", err=True)
            raise typer.Exit(1)
