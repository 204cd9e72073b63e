"""Choosing tasks for a run: deterministic, spread over the split (registries list tasks sorted
by type, so the first N would all be one type)."""

from __future__ import annotations

from collections.abc import Sequence

from harness_r1.contracts import TaskSpec


def spread(tasks: Sequence[TaskSpec], limit: int | None, offset: int = 0) -> list[TaskSpec]:
    """`limit` tasks evenly spaced over the list, starting at `offset` (wrapping)."""
    if not tasks:
        return []
    n = len(tasks)
    if limit is None or limit >= n:
        return list(tasks)
    return [tasks[(offset + (i * n) // limit) % n] for i in range(limit)]
