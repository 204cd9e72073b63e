"""`harness-r1 publish FILE.jsonl`: produce a file of trajectories to the trajectory topic.

For agents that do not embed our Python client (docs/agents.md, the producer contract): a way
to check what they write and to send a file of it, and for an operator to replay a saved run.
Every line is validated by the daemon's own ingest parser (`parse_trajectory`, with the
daemon's `kafka.max_record_bytes`), so a line this command accepts is one the daemon stores,
and a line it refuses is refused with the reason code the daemon's dead letter would carry.

Records go out as our own agents send theirs (the demo fleet's sink): no key, no headers, the
value the line's bytes as they are (the daemon stores the bytes it received, never a
re-serialisation). Sending is at least once: a run cut short by the broker can simply be run
again, the daemon deduplicates by trajectory_id.

All or nothing: every line is checked before anything is sent, and one invalid line sends
nothing unless `--skip-invalid` (then the valid lines are sent and the exit code still says
some were not). Exit codes: 0 every line valid (and sent, unless `--dry-run`); 1 some line
invalid; 3 the broker did not acknowledge a record (the output says how many were sent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from harness_r1.consumers import KafkaSettings

#: A record the broker did not acknowledge (bad input is 1, click's usage errors are 2).
EXIT_PUBLISH_FAILED = 3


@dataclass(frozen=True)
class Line:
    """One non-blank line of the file: its 1-based number and its bytes (no line end)."""

    number: int
    value: bytes


@dataclass(frozen=True)
class Checked:
    """A file's lines sorted: the valid ones with their trajectory ids, the invalid ones with
    the reason the daemon would give (`code: detail`)."""

    valid: list[tuple[Line, str]]
    invalid: list[tuple[Line, str]]
    #: (line, first line) for each valid line whose trajectory_id an earlier line has.
    repeats: list[tuple[int, int]]
    #: (line, why) for each valid failure the daemon stores but cannot replay (its task is not
    #: in the benchmark data): warned about, sent all the same.
    unreplayable: list[tuple[int, str]] = field(default_factory=list)


def read_lines(path: Path) -> list[Line]:
    """The file's non-blank lines, numbered as an editor numbers them. Split on LF only (a
    JSON text cannot hold a raw line break), a CR before it dropped."""
    lines: list[Line] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            value = raw.removesuffix(b"\n").removesuffix(b"\r")
            if value.strip():
                lines.append(Line(number, value))
    return lines


def check_lines(
    lines: list[Line],
    max_bytes: int,
    replay_check: Callable[[str, str, str], str | None] | None = None,
) -> Checked:
    """Validate each line as the daemon's ingest would (same parser, same size limit) and,
    with `replay_check` (`daemon/replayable.py`), note the failures it could not replay."""
    from harness_r1.consumers import is_failure
    from harness_r1.daemon import Unreadable, parse_trajectory

    valid: list[tuple[Line, str]] = []
    invalid: list[tuple[Line, str]] = []
    first_seen: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    unreplayable: list[tuple[int, str]] = []
    for line in lines:
        try:
            trajectory = parse_trajectory(line.value, max_bytes)
        except Unreadable as err:
            invalid.append((line, err.reason))
            continue
        tid = trajectory.trajectory_id
        if tid in first_seen:
            repeats.append((line.number, first_seen[tid]))
        else:
            first_seen[tid] = line.number
        valid.append((line, tid))
        if replay_check is not None and is_failure(trajectory):
            task = trajectory.task
            why = replay_check(task.env, task.split, task.task_id)
            if why is not None:
                unreplayable.append((line.number, why))
    return Checked(valid, invalid, repeats, unreplayable)


def publish_command(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, help="JSON Lines: one Trajectory JSON object a line."
        ),
    ],
    config: Annotated[
        Path | None, typer.Option("--config", exists=True, help="Daemon settings (YAML).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate every line, send nothing.")
    ] = False,
    skip_invalid: Annotated[
        bool,
        typer.Option(
            "--skip-invalid", help="Send the valid lines even if some are not (exit code 1)."
        ),
    ] = False,
) -> None:
    """Validate a file of trajectories as the daemon would, then produce it to the trajectory
    topic: nothing is sent if any line is invalid (each named with its line number and reason)
    unless --skip-invalid. The producer contract is in docs/agents.md.

    Example: `harness-r1 publish runs/x.jsonl --dry-run`"""
    from harness_r1.cli.settings import cli_settings
    from harness_r1.daemon import ReplayableTasks, TaskIndex

    settings = cli_settings(config)
    replay = ReplayableTasks(TaskIndex(settings.data_root))
    checked = check_lines(read_lines(file), settings.kafka.max_record_bytes, replay.why_not)
    for line, reason in checked.invalid:
        typer.echo(f"{file}:{line.number}: {reason}", err=True)
    for number, why in checked.unreplayable:
        typer.echo(
            f"{file}:{number}: warning: {why}: the daemon stores this failure but cannot "
            "replay it, so it never enters a batch (counted as unreplayable)",
            err=True,
        )
    for number, first in checked.repeats:
        typer.echo(
            f"{file}:{number}: same trajectory_id as line {first} (the daemon stores it once)",
            err=True,
        )
    counts = f"{len(checked.valid)} valid, {len(checked.invalid)} invalid"
    send = [line for line, _ in checked.valid]
    if checked.invalid and not skip_invalid:
        typer.echo(f"{counts}: nothing sent (--skip-invalid sends the valid lines)")
        raise typer.Exit(1)
    if dry_run:
        typer.echo(f"{counts}: nothing sent (--dry-run)")
        raise typer.Exit(1 if checked.invalid else 0)
    sent = _produce(settings.kafka_client("harness-r1-cli"), settings.trajectory_topic, send)
    typer.echo(f"{counts}: {sent} sent to {settings.trajectory_topic}")
    raise typer.Exit(1 if checked.invalid else 0)


def _produce(kafka: KafkaSettings, topic: str, lines: list[Line]) -> int:
    """Send each line as our agents send a trajectory (no key, no headers), each acknowledged
    before the next; exits EXIT_PUBLISH_FAILED, saying how far it got, on the first failure."""
    from harness_r1.consumers import KafkaUnavailableError, PublishError, make_producer, publish

    if not lines:
        return 0
    try:
        producer = make_producer(kafka)
    except KafkaUnavailableError as err:
        typer.echo(f"nothing sent: {err}", err=True)
        raise typer.Exit(EXIT_PUBLISH_FAILED) from err
    sent = 0
    try:
        for line in lines:
            publish(producer, topic, line.value, timeout_s=kafka.send_timeout_s)
            sent += 1
    except PublishError as err:
        typer.echo(
            f"line {lines[sent].number}: {err}\n{sent} of {len(lines)} sent; running this again is "
            "safe (the daemon deduplicates by trajectory_id)",
            err=True,
        )
        raise typer.Exit(EXIT_PUBLISH_FAILED) from err
    finally:
        producer.close(timeout=5)
    return sent
