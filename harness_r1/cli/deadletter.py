"""`harness-r1 deadletter list|redrive`: what an operator does with the dead-letter topic.

`list` reads the topic from its start and shows each dead letter: its id, reason, where it
came from, its size. `redrive` publishes chosen dead letters' original records again to the
topic they came from (original key and headers, plus `redriven_from`), for when the cause is
fixed (a daemon upgraded to read a new schema, a store column widened): the daemon reads them
like any record, a stored copy is deduplicated by trajectory_id, and one still unreadable
becomes a new dead letter (with a new id). A truncated dead letter cannot be re-driven: its
original bytes are gone (the producer kept them, or nobody).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from harness_r1.cli.group import command_group

if TYPE_CHECKING:
    from harness_r1.consumers import Record

deadletter_app = command_group("The dead-letter topic: inspect it, re-drive records from it.")
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Daemon settings file (YAML).", exists=True)
]


@dataclass(frozen=True)
class DeadLetterView:
    dead_letter_id: str
    reason_code: str
    reason: str
    source: str  # topic:partition@offset
    size: int
    truncated: bool
    offset: int  # in the dead-letter topic


def _view(record_offset: int, partition: int, headers: dict[str, str], size: int) -> DeadLetterView:
    source = (
        f"{headers.get('source_topic', '?')}:{headers.get('source_partition', '?')}"
        f"@{headers.get('source_offset', '?')}"
    )
    return DeadLetterView(
        dead_letter_id=headers.get("dead_letter_id", f"dlq:{partition}@{record_offset}"),
        reason_code=headers.get("reason_code", headers.get("reason", "?").split(":")[0]),
        reason=headers.get("reason", ""),
        source=source,
        size=int(headers.get("original_size", size)),
        truncated=headers.get("truncated") == "1",
        offset=record_offset,
    )


def _read_all(config: Path | None) -> list[tuple[Record, DeadLetterView]]:
    from harness_r1.cli.settings import cli_settings
    from harness_r1.consumers import BroadcastReader
    from harness_r1.daemon import original_record_parts

    settings = cli_settings(config)
    kafka = settings.kafka_client("harness-r1-cli")
    out: list[tuple[Record, DeadLetterView]] = []
    with BroadcastReader(kafka, [settings.kafka.dead_letter_topic]) as reader:
        quiet = 0
        while quiet < 3:  # the end: three polls in a row with nothing new
            records = reader.poll(500)
            quiet = 0 if records else quiet + 1
            for record in records:
                _, ours = original_record_parts(record.headers)
                view = _view(record.offset, record.partition, ours, len(record.value))
                out.append((record, view))
    return out


@deadletter_app.command("list")
def deadletter_list(
    config: ConfigOption = None,
    reason: Annotated[str | None, typer.Option(help="Only this reason code.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON Lines instead of a table.")] = False,
) -> None:
    """Show the dead letters (oldest first).

    Example: `harness-r1 deadletter list --reason invalid`"""
    views = [view for _, view in _read_all(config) if reason in (None, view.reason_code)]
    if as_json:
        for view in views:
            typer.echo(json.dumps(asdict(view)))
        return
    table = Table("dead letter id", "reason", "source", "bytes", "truncated")
    for view in views:
        table.add_row(
            view.dead_letter_id,
            view.reason[:80],
            view.source,
            str(view.size),
            "yes" if view.truncated else "",
        )
    Console(width=200).print(table)
    typer.echo(f"{len(views)} dead letters")
    typer.echo(_compare_with_store(config, {view.source for view in views}))


def _compare_with_store(config: Path | None, on_topic: set[str]) -> str:
    """One line on how the store's outbox (every dead letter the daemon wrote) and the topic
    (what the broker holds) differ, and why they may."""
    from harness_r1.cli.settings import cli_settings
    from harness_r1.daemon.store import StateStore

    settings = cli_settings(config)
    store = StateStore(settings.registry_url())
    try:
        outbox = store.dead_letter_sources(settings.kafka.group_id)
    finally:
        store.close()
    pending = sum(not published for published in outbox.values())
    gone = sum(published and source not in on_topic for source, published in outbox.items())
    extra = len(on_topic - outbox.keys())
    return (
        f"the store's outbox holds {len(outbox)} for group {settings.kafka.group_id}: "
        f"{pending} pending (not yet on the topic: the daemon publishes them when the topic "
        f"takes them), {gone} published but no longer on the topic (retention, or the topic "
        f"was reset), and the topic holds {extra} the outbox lacks (another group's, or the "
        "outbox's retention)"
    )


@deadletter_app.command("redrive")
def deadletter_redrive(
    ids: Annotated[list[str] | None, typer.Argument(help="Dead letter ids to re-drive.")] = None,
    config: ConfigOption = None,
    reason: Annotated[
        str | None, typer.Option(help="Re-drive every dead letter with this reason code.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Say what would be re-driven.")] = False,
) -> None:
    """Publish dead letters' original records again to their source topic.

    Example: `harness-r1 deadletter redrive --reason unsupported_version`"""
    from harness_r1.cli.settings import cli_settings
    from harness_r1.consumers import make_producer, publish
    from harness_r1.daemon import original_record_parts

    if not ids and reason is None:
        raise typer.BadParameter("name dead letter ids, or --reason CODE")
    wanted = set(ids or ())
    chosen: list[tuple[Record, DeadLetterView]] = []
    seen: set[str] = set()
    for record, view in _read_all(config):
        if view.dead_letter_id in seen:
            continue  # a copy (a crash between publish and mark): re-drive the record once
        named = view.dead_letter_id in wanted
        # A record re-driven before and dead-lettered again is re-driven by its id only:
        # `--reason` picking it up too would double it on every run.
        again = any(name == "original.redriven_from" for name, _ in record.headers)
        if named or (reason is not None and view.reason_code == reason and not again):
            seen.add(view.dead_letter_id)
            chosen.append((record, view))
    missing = wanted - {view.dead_letter_id for _, view in chosen}
    if missing:
        typer.echo(f"not on the dead-letter topic: {', '.join(sorted(missing))}", err=True)
        raise typer.Exit(1)
    truncated = [view.dead_letter_id for _, view in chosen if view.truncated]
    if truncated:
        typer.echo(f"skipped (truncated, original bytes gone): {', '.join(truncated)}", err=True)
    chosen = [(record, view) for record, view in chosen if not view.truncated]
    if dry_run:
        for _, view in chosen:
            typer.echo(f"would re-drive {view.dead_letter_id} to {view.source}")
        return
    settings = cli_settings(config)
    producer = make_producer(settings.kafka_client("harness-r1-cli"))
    try:
        for record, view in chosen:
            original, ours = original_record_parts(record.headers)
            headers = [*original, ("redriven_from", view.dead_letter_id.encode())]
            partition, offset = publish(
                producer,
                ours["source_topic"],
                record.value,
                key=record.key,
                headers=headers,
                timestamp_ms=int(ours.get("source_timestamp_ms", "0")),
            )
            where = f"{ours['source_topic']}:{partition}@{offset}"
            typer.echo(f"re-drove {view.dead_letter_id} -> {where}")
    finally:
        producer.close(timeout=5)
