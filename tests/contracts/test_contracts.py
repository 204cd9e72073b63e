from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness_r1.contracts import (
    MESSAGES,
    HookName,
    Outcome,
    Patch,
    TargetRef,
    TaskRef,
    Termination,
    Timings,
    Trajectory,
    UnsupportedSchemaVersion,
)
from harness_r1.contracts.schemas import render_schemas

REPO = Path(__file__).resolve().parents[2]


def _trajectory(**overrides: object) -> Trajectory:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fields: dict[str, object] = dict(
        trajectory_id="t1",
        agent_id="a1",
        target=TargetRef(model_id="m"),
        harness_version="base",
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id="dev-000",
            task_type="INSERT",
            instruction="x",
            seed=0,
        ),
        steps=[],
        outcome=Outcome(success=False, reward=0.0, termination=Termination.STEP_LIMIT, steps=0),
        timings=Timings(started_at=now, finished_at=now),
    )
    fields.update(overrides)
    return Trajectory.model_validate(fields)


def test_every_message_carries_schema_version() -> None:
    for name, model in MESSAGES.items():
        assert "schema_version" in model.model_fields, name


def test_trajectory_round_trips_through_json_bytes() -> None:
    t = _trajectory()
    assert Trajectory.from_json_bytes(t.to_json_bytes()) == t


@pytest.mark.parametrize("version", ["2.0", "0.9", "x", "1.a"])
def test_unknown_major_versions_are_rejected_with_a_clear_error(version: str) -> None:
    data = json.loads(_trajectory().to_json_bytes())
    data["schema_version"] = version
    with pytest.raises(ValidationError) as info:
        Trajectory.model_validate(data)
    assert "schema_version" in str(info.value)


def test_minor_versions_are_read() -> None:
    data = json.loads(_trajectory().to_json_bytes())
    data["schema_version"] = "1.7"
    assert Trajectory.model_validate(data).schema_version == "1.7"


def test_unsupported_schema_version_is_a_value_error() -> None:
    assert issubclass(UnsupportedSchemaVersion, ValueError)


def test_unknown_fields_are_rejected() -> None:
    data = json.loads(_trajectory().to_json_bytes())
    data["surprise"] = 1
    with pytest.raises(ValidationError):
        Trajectory.model_validate(data)


def test_patch_rejects_repeated_hooks_and_unknown_hook_names() -> None:
    code = "def hook(ctx, state):\n    return None\n"
    with pytest.raises(ValidationError, match="repeated"):
        Patch(env="alfworld", hooks=[{"hook": "pre_action", "code": code}] * 2)  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        Patch(env="alfworld", hooks=[{"hook": "post_everything", "code": code}])  # type: ignore[list-item]
    patch = Patch(env="alfworld", hooks=[{"hook": "pre_action", "code": code}])  # type: ignore[list-item]
    assert (
        patch.code_for(HookName.PRE_ACTION) == code
        and patch.code_for(HookName.PRE_DECISION) is None
    )


def test_patch_hash_is_content_addressed() -> None:
    a = Patch(env="alfworld", hooks=[{"hook": "pre_action", "code": "x"}])  # type: ignore[list-item]
    b = Patch(env="alfworld", hooks=[{"hook": "pre_action", "code": "x"}])  # type: ignore[list-item]
    c = Patch(env="alfworld", hooks=[{"hook": "pre_action", "code": "y"}])  # type: ignore[list-item]
    assert a.sha256() == b.sha256() != c.sha256()


def test_committed_schemas_are_current() -> None:
    committed = REPO / "docs" / "schemas"
    rendered = render_schemas()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in committed.glob("*.schema.json")}
    stale = sorted(n for n in rendered if on_disk.get(n) != rendered[n])
    extra = sorted(set(on_disk) - set(rendered))
    assert not stale and not extra, (
        f"docs/schemas is out of date (stale: {stale}, extra: {extra}); run `make schemas`"
    )
