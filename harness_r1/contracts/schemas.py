"""JSON Schema export of every message (docs/schemas is the committed copy)."""

from __future__ import annotations

import json
from pathlib import Path

from harness_r1.contracts.base import Message
from harness_r1.contracts.canary import CanaryReport, CandidateResult
from harness_r1.contracts.envelopes import ControlCommand, OverlayRelease, SignedEnvelope
from harness_r1.contracts.packet import FailurePacket
from harness_r1.contracts.patch import Patch
from harness_r1.contracts.task import TaskSpec
from harness_r1.contracts.trajectory import Trajectory

#: Every top-level message, by the file name its JSON Schema is exported under.
MESSAGES: dict[str, type[Message]] = {
    "trajectory": Trajectory,
    "task_spec": TaskSpec,
    "failure_packet": FailurePacket,
    "patch": Patch,
    "overlay_release": OverlayRelease,
    "control_command": ControlCommand,
    "signed_envelope": SignedEnvelope,
    "candidate_result": CandidateResult,
    "canary_report": CanaryReport,
}


def render_schemas() -> dict[str, str]:
    """File name -> schema text, deterministic so the committed copies can be compared."""
    return {
        f"{name}.schema.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for name, model in sorted(MESSAGES.items())
    }


def export_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, text in render_schemas().items():
        path = directory / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
