"""Operator views of overlays: hook-by-hook diffs and the JSON of `overlay show`.

Why a module of its own: these read records only, never the database, and change with what
operators want to see rather than with how overlays are stored or moved.
"""

from __future__ import annotations

import builtins
import difflib
from typing import Any

from harness_r1.contracts import HookName
from harness_r1.deploy.registry_records import OverlayEvent, OverlayLink, OverlayRecord


def diff_overlays(a: OverlayRecord, b: OverlayRecord) -> str:
    """Unified diff of two overlays' hook sources, hook by hook ("" when they are the same).

    A hook present on one side only is diffed against nothing, so it shows as wholly added or
    removed.
    """
    lines: builtins.list[str] = [f"# overlay {a.overlay_id} -> {b.overlay_id}"]
    changed = False
    for hook in HookName:
        before, after = a.patch.code_for(hook), b.patch.code_for(hook)
        if before == after:
            continue
        changed = True
        lines.extend(
            difflib.unified_diff(
                (before or "").splitlines(),
                (after or "").splitlines(),
                fromfile=f"{a.overlay_id}/{hook}" + ("" if before is not None else " (absent)"),
                tofile=f"{b.overlay_id}/{hook}" + ("" if after is not None else " (absent)"),
                lineterm="",
            )
        )
    return "\n".join(lines) + "\n" if changed else ""


def _event_view(ev: OverlayEvent) -> dict[str, Any]:
    return {
        "at": ev.at.isoformat(),
        "from_state": None if ev.from_state is None else str(ev.from_state),
        "to_state": str(ev.to_state),
        "actor": ev.actor,
        "reason": ev.reason,
        "evidence": ev.evidence,
    }


def render_record(
    record: OverlayRecord,
    events: builtins.list[OverlayEvent] | None = None,
    link: OverlayLink | None = None,
    chain: builtins.list[str] | None = None,
) -> dict[str, Any]:
    """A JSON-ready view of one overlay and its history, for `overlay show`: the composed
    hooks the fleet runs, which link contributed each, and its own link."""
    ids = chain or [record.overlay_id]
    positions = (
        link.contributors
        if link is not None
        else {str(h.hook): [len(ids)] for h in record.patch.hooks}
    )
    composition: dict[str, Any] = {
        "chain": ids,
        "contributors": {
            hook: [ids[p - 1] if 0 < p <= len(ids) else f"#{p}" for p in found]
            for hook, found in positions.items()
        },
        "link": None if link is None else link.patch.model_dump(mode="json"),
    }
    return {
        "overlay_id": record.overlay_id,
        "target": record.target,
        "env": record.env,
        "state": str(record.state),
        "patch_sha256": record.patch_sha256,
        "packet_id": record.packet_id,
        "group_id": record.group_id,
        "parent_overlay_id": record.parent_overlay_id,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "evidence": record.evidence,
        "patch": record.patch.model_dump(mode="json"),
        "composition": composition,
        "events": [_event_view(ev) for ev in events or []],
    }
