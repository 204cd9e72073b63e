"""Pydantic models of every message and file format. Imports nothing else of harness_r1.

Modules:
- attribution.py: Who decided each action: the model, or a hook in its place
- base.py: The envelope every message shares: a frozen pydantic model with a checked
  schema_version
- canary.py: Canary results: what a candidate patch did to the frozen target on a paired batch
- envelopes.py: Signed envelopes for overlay releases and control commands
- faults.py: The one list of ways a hook call can end without an effect
- hooks.py: Hook names and the effects a hook may have; shared by the runtime, patches and
  trajectories
- packet.py: FailurePacket: what the engineer reads
- patch.py: Patch: model-written hook code for one environment
- schemas.py: JSON Schema export of every message (docs/schemas is the committed copy)
- task.py: TaskSpec: one task of one environment, addressable by (env, split, task_id)
- trajectory.py: Trajectory: one episode of a deployed (or canary) agent, as published to Kafka
"""

from harness_r1.contracts.attribution import (
    ActionOrigin,
    OriginCounts,
    format_share,
)
from harness_r1.contracts.base import (
    SCHEMA_VERSION,
    Contract,
    Message,
    UnsupportedSchemaVersion,
    check_schema_version,
)
from harness_r1.contracts.canary import (
    CanaryReport,
    CandidateCost,
    CandidateResult,
    PairedTask,
    PatchAlone,
)
from harness_r1.contracts.envelopes import (
    INGEST_TARGET_PREFIX,
    ControlCommand,
    ControlKind,
    OverlayRelease,
    SignedEnvelope,
)
from harness_r1.contracts.faults import HookFaultKind
from harness_r1.contracts.hooks import ALLOWED_EFFECTS, EffectKind, HookName
from harness_r1.contracts.packet import (
    FailurePacket,
    IncumbentHook,
    PacketEpisode,
    RuntimeSignals,
    Snippet,
)
from harness_r1.contracts.patch import HookCode, HookMode, Patch
from harness_r1.contracts.schemas import MESSAGES, export_schemas, render_schemas
from harness_r1.contracts.task import TaskRef, TaskSpec
from harness_r1.contracts.trajectory import (
    BASE_HARNESS,
    TRAJECTORY_SCHEMA_VERSION,
    HookEffect,
    HookFault,
    Outcome,
    Step,
    TargetRef,
    Termination,
    Timings,
    Trajectory,
)

__all__ = [
    "ALLOWED_EFFECTS",
    "ActionOrigin",
    "BASE_HARNESS",
    "CanaryReport",
    "CandidateCost",
    "CandidateResult",
    "Contract",
    "ControlCommand",
    "ControlKind",
    "EffectKind",
    "FailurePacket",
    "HookCode",
    "HookEffect",
    "HookFault",
    "HookFaultKind",
    "HookMode",
    "HookName",
    "INGEST_TARGET_PREFIX",
    "IncumbentHook",
    "MESSAGES",
    "render_schemas",
    "Message",
    "OriginCounts",
    "Outcome",
    "OverlayRelease",
    "PacketEpisode",
    "PairedTask",
    "Patch",
    "PatchAlone",
    "RuntimeSignals",
    "SCHEMA_VERSION",
    "SignedEnvelope",
    "Snippet",
    "Step",
    "TRAJECTORY_SCHEMA_VERSION",
    "TargetRef",
    "TaskRef",
    "TaskSpec",
    "Termination",
    "Timings",
    "Trajectory",
    "UnsupportedSchemaVersion",
    "check_schema_version",
    "export_schemas",
    "format_share",
]
