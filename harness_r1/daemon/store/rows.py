"""Small helpers shared by the store's parts: time, chunks, leases, and rows to records."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from harness_r1.daemon.deadletter import DeadLetter, ReasonCode

# --- helpers --------------------------------------------------------------------------------
from harness_r1.daemon.store.records import (
    _CHUNK,
    _T,
    BatchKey,
    CandidateRow,
    GroupRow,
    IngestItem,
    StoreError,
)
from harness_r1.daemon.store.schema import (
    _BatchRow,
    _BufferRow,
    _CandidateRowModel,
    _DeadLetterRow,
    _GroupRowModel,
)


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} must be a tz-aware datetime (UTC), got {value!r}")
    return value.astimezone(UTC)


def _chunks(values: Sequence[_T], size: int = _CHUNK) -> Iterator[Sequence[_T]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _new_batch_id() -> str:
    return f"b-{uuid.uuid4().hex[:12]}"


def _lease(lease_s: float) -> timedelta:
    if not lease_s > 0 or not math.isfinite(lease_s):
        raise ValueError(f"a lease must last a positive, finite number of seconds, got {lease_s}")
    return timedelta(seconds=lease_s)


def _key(row: _BatchRow | _BufferRow) -> BatchKey:
    return BatchKey(row.env, row.target, row.harness_version)


def _dump_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise StoreError(f"{what} must be JSON-serialisable (finite numbers): {err}") from err


def _to_group(row: _GroupRowModel) -> GroupRow:
    return GroupRow(
        group_id=row.group_id,
        packet_id=row.packet_id,
        prompt=row.prompt,
        completions=tuple(json.loads(row.completions_json)),
        rewards=tuple(json.loads(row.rewards_json)),
        created_at=row.created_at,
    )


def _to_candidate(row: _CandidateRowModel) -> CandidateRow:
    return CandidateRow(
        candidate_id=row.candidate_id,
        completion=row.completion,
        patch_json=row.patch_json,
        status=row.status,
        reward=row.reward,
        delta_success=row.delta_success,
        gate_verdict=row.gate_verdict,
        overlay_id=row.overlay_id,
    )


def _to_dead_letter(row: _DeadLetterRow) -> DeadLetter:
    return DeadLetter(
        group=row.consumer_group,
        topic=row.kafka_topic,
        partition=row.kafka_partition,
        offset=int(row.kafka_offset),
        timestamp_ms=int(row.timestamp_ms),
        key=row.record_key,
        headers=DeadLetter.headers_from_json(row.headers_json),
        value=bytes(row.value),
        original_size=int(row.original_size),
        reason_code=ReasonCode(row.reason_code),
        detail=row.detail,
    )


def _trajectory_values(item: IngestItem, now: datetime) -> dict[str, Any]:
    return {
        "trajectory_id": item.trajectory_id,
        "env": item.env,
        "target": item.target,
        "harness_version": item.harness_version,
        "agent_id": item.agent_id,
        "task_id": item.task_id,
        "task_type": item.task_type,
        "success": item.success,
        "reward": float(item.reward),
        "failed": item.failed,
        "payload": bytes(item.payload),
        "kafka_topic": item.topic,
        "kafka_partition": item.partition,
        "kafka_offset": item.offset,
        "consumed_at": now,
    }
