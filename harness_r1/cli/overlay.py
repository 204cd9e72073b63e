"""`harness-r1 overlay ...` and `harness-r1 keys ...`: the operator's handles on deploy.

list/show/diff read the registry only; release/rollback/pin/pause/resume sign a message,
publish it on Kafka and record it in the registry (who, why, the seq it went out with).
A control command that was published exits 0: recording it races with the daemon's control
follower, and whichever is second finds it done (`deploy/control_effect.py` `record_control`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from harness_r1.cli.group import command_group
from harness_r1.cli.settings import cli_settings

overlay_app = command_group("Overlays: inspect, release, take back.")
keys_app = command_group("Ed25519 signing keys.")
# Piped output is not cut to 80 columns: ids must survive `| grep`, `| awk` and `> file`.
console = Console(width=None if sys.stdout.isatty() else 240)

Actor = Annotated[str, typer.Option(help="Who acts (recorded in the registry and the message).")]
Reason = Annotated[str, typer.Option(help="Why (recorded in the registry and the message).")]


def _registry():  # type: ignore[no-untyped-def]
    from harness_r1.deploy import OverlayRegistry

    return OverlayRegistry(cli_settings().registry_url())


def _default_actor() -> str:
    return os.environ.get("USER") or "operator"


@keys_app.command("generate")
def keys_generate(
    key_id: str,
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the key pair.")],
) -> None:
    """Write KEY_ID.key (private, mode 0600) and KEY_ID.pub into --dir.

    Example: `harness-r1 keys generate ops-1 --dir keys`"""
    from harness_r1.deploy import generate_keypair

    private, public = generate_keypair(directory, key_id)
    typer.echo(f"private: {private}\npublic:  {public}")


@overlay_app.command("add")
def overlay_add(
    file: Path,
    target: Annotated[str, typer.Option(help="Agent pool the overlay is for.")],
    env: Annotated[str | None, typer.Option(help="Env, when the file does not name one.")] = None,
    parent: Annotated[
        str | None,
        typer.Option(help="Overlay to compose onto: FILE becomes the newest link of its chain."),
    ] = None,
    actor: Actor = "",
) -> None:
    """Register a hand-written patch FILE as a candidate (it must pass the static checks);
    with --parent, FILE composed onto that overlay's chain (the composition must pass too).

    Example: `harness-r1 overlay add fix.patch --target pool-a --env dbbench --parent ov-3f2a9c`"""
    from harness_r1.sandbox import CompositionRefused, Link, check, compose_chain, load_patch_file

    patch = load_patch_file(file, env)
    refusal = check(patch)
    if refusal is not None:
        console.print(f"[red]rejected[/red] {refusal}")
        raise typer.Exit(1)
    if parent is None and not patch.runnable:
        console.print(
            "[red]rejected[/red] not_composed: 'replace'/'remove' entries need --parent (the "
            "overlay whose hooks they replace or remove)"
        )
        raise typer.Exit(1)
    registry = _registry()
    overlay, contributors = patch, None
    if parent is not None:
        chain = [Link(oid, link) for oid, link in registry.chain(parent)]
        try:
            composition = compose_chain([*chain, Link(f"file-{file.stem}", patch)])
        except CompositionRefused as err:
            console.print(f"[red]rejected[/red] composition_{err.code}: {err.message}")
            raise typer.Exit(1) from err
        overlay, contributors = composition.patch, composition.describe()
    record = registry.add(
        overlay,
        target,
        parent_overlay_id=parent,
        evidence={"source": str(file)},
        actor=actor or _default_actor(),
        link=patch if parent is not None else None,
        contributors=contributors,
    )
    typer.echo(record.overlay_id)


@overlay_app.command("list")
def overlay_list(
    target: Annotated[str | None, typer.Option(help="Agent pool.")] = None,
    state: Annotated[str | None, typer.Option(help="candidate|canary|active|...")] = None,
) -> None:
    """Overlays in the registry, newest first.

    Example: `harness-r1 overlay list --target pool-a --state active`"""
    registry = _registry()
    table = Table("overlay", "target", "env", "state", "sha256", "parent", "updated")
    records = registry.list(target=target, state=state)
    for record in records:
        table.add_row(
            record.overlay_id,
            record.target,
            record.env,
            record.state.value,
            record.patch_sha256[:12],
            record.parent_overlay_id or "-",
            record.updated_at.isoformat(timespec="seconds"),
        )
    console.print(table)
    targets = sorted({target} if target else {r.target for r in records})
    for held in filter(None, (registry.hold(t) for t in targets)):
        console.print(held.describe(), highlight=False)


@overlay_app.command("show")
def overlay_show(overlay_id: str) -> None:
    """One overlay as JSON: the composed patch the fleet runs, its chain of links and which
    link contributed each hook, its own link, state, evidence and event history.

    Example: `harness-r1 overlay show ov-3f2a9c`"""
    from harness_r1.deploy import render_record

    registry = _registry()
    record = registry.get(overlay_id)
    chain = [oid for oid, _ in registry.chain(overlay_id)]
    view = render_record(record, registry.events(overlay_id), registry.link(overlay_id), chain)
    held = registry.hold(record.target)
    view["pool_hold"] = None if held is None else held.describe()
    typer.echo(json.dumps(view, indent=2))


@overlay_app.command("diff")
def overlay_diff(
    a: str,
    b: str,
    links: Annotated[
        bool, typer.Option("--links", help="Diff the two overlays' own links, not what runs.")
    ] = False,
) -> None:
    """Unified diff of two overlays' hook sources: the composed hooks the fleet runs (what
    changes for agents between two links of a chain), or with --links what each link added.

    Example: `harness-r1 overlay diff ov-3f2a9c ov-77b1e0`"""
    from dataclasses import replace

    from harness_r1.deploy import OverlayRecord, diff_overlays

    registry = _registry()

    def shown(overlay_id: str) -> OverlayRecord:
        record = registry.get(overlay_id)
        own = registry.link(overlay_id) if links else None  # a root's link is its patch
        return record if own is None else replace(record, patch=own.patch)

    typer.echo(diff_overlays(shown(a), shown(b)) or "(identical hook sources)")


def _publisher():  # type: ignore[no-untyped-def]
    from harness_r1.consumers import ensure_topics, make_producer, publish
    from harness_r1.deploy import Publisher, PublisherConfig, Signer

    settings = cli_settings()
    kafka = settings.kafka_client("harness-r1-cli")
    ensure_topics(kafka, [settings.release_topic, settings.control_topic])
    producer = make_producer(kafka)

    def send(topic: str, value: bytes, key: bytes | None) -> None:
        publish(producer, topic, value, key=key, timeout_s=kafka.send_timeout_s)

    config = PublisherConfig(
        release_topic=settings.release_topic, control_topic=settings.control_topic
    )
    signer = Signer.from_file(settings.require_signing_key())
    return Publisher(_registry(), signer, send, config), producer


def _control(command: str, target: str, actor: str, reason: str, **ids: str | None) -> None:
    from harness_r1.contracts import ControlKind

    publisher, producer = _publisher()
    try:
        sent = publisher.control(ControlKind(command), target, actor=actor, reason=reason, **ids)
    finally:
        producer.close(timeout=10)
    typer.echo(sent.model_dump_json(indent=2))
    # Published means done (agents obey it): exit 0 whatever recording came to. The daemon
    # may have recorded it first ("already_applied"), which is expected.
    if publisher.last_recorded == "not_recorded":
        typer.echo(
            f"note: published seq {sent.seq}, but the registry could not be written; the "
            "daemon's control follower records it when it reads the control topic",
            err=True,
        )


@overlay_app.command("release")
def overlay_release(
    overlay_id: str,
    fraction: Annotated[float, typer.Option(help="Share of the pool (canary) in (0, 1].")] = 1.0,
    actor: Actor = "",
    reason: Reason = "operator release",
) -> None:
    """Sign and publish a release of OVERLAY_ID to its pool (or a fraction of it).

    Example: `harness-r1 overlay release ov-3f2a9c --fraction 0.1 --reason "canary 10%"`"""
    publisher, producer = _publisher()
    try:
        sent = publisher.release(
            overlay_id, fraction=fraction, actor=actor or _default_actor(), reason=reason
        )
    finally:
        producer.close(timeout=10)
    typer.echo(f"released {sent.overlay_id} to {sent.target} seq={sent.seq}")
    held = _registry().hold(sent.target)
    if held is not None:
        typer.echo(f"note: {held.describe()}", err=True)


@overlay_app.command("rollback")
def overlay_rollback(
    target: Annotated[str, typer.Option(help="Agent pool.")],
    to: Annotated[
        str | None, typer.Option("--to", help="Overlay to return to ('base' for none).")
    ] = None,
    overlay: Annotated[
        str | None, typer.Option(help="Overlay to take back (default: the newest live one).")
    ] = None,
    actor: Actor = "",
    reason: Reason = "operator rollback",
) -> None:
    """Take an overlay back: its agents return to the previous (or --to) overlay.

    Example: `harness-r1 overlay rollback --target pool-a --to base --reason "success fell"`"""
    actor = actor or _default_actor()
    _control("rollback", target, actor, reason, overlay_id=to, revoke_overlay_id=overlay)


@overlay_app.command("pin")
def overlay_pin(
    target: Annotated[str, typer.Option(help="Agent pool.")],
    to: Annotated[
        str | None, typer.Option("--to", help="Overlay to pin (default: current).")
    ] = None,
    actor: Actor = "",
    reason: Reason = "operator pin",
) -> None:
    """Hold the pool on one overlay; new releases wait until `resume`.

    Example: `harness-r1 overlay pin --target pool-a --reason "freeze for the audit"`"""
    _control("pin", target, actor or _default_actor(), reason, overlay_id=to)


@overlay_app.command("pause")
def overlay_pause(
    target: Annotated[str, typer.Option(help="Agent pool.")],
    actor: Actor = "",
    reason: Reason = "operator pause",
) -> None:
    """Keep the current overlay; new releases wait until `resume`.

    Example: `harness-r1 overlay pause --target pool-a --reason "incident 42"`"""
    _control("pause", target, actor or _default_actor(), reason)


@overlay_app.command("resume")
def overlay_resume(
    target: Annotated[str, typer.Option(help="Agent pool.")],
    actor: Actor = "",
    reason: Reason = "operator resume",
) -> None:
    """Apply releases again (the latest one parked while paused or pinned).

    Example: `harness-r1 overlay resume --target pool-a --reason "incident 42 closed"`"""
    _control("resume", target, actor or _default_actor(), reason)
