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

__all__ = [
    "ALLOWED_EFFECTS",
    "ActionOrigin",
    "OriginCounts",
    "TRAJECTORY_SCHEMA_VERSION",
    "format_share",
    "BASE_HARNESS",
    "CandidateCost",
    "CandidateResult",
    "CanaryReport",
    "PairedTask",
    "PatchAlone",
    "MESSAGES",
    "SCHEMA_VERSION",
    "Contract",
    "ControlCommand",
    "ControlKind",
    "EffectKind",
    "FailurePacket",
    "HookCode",
    "HookMode",
    "IncumbentHook",
    "HookEffect",
    "HookFault",
    "HookFaultKind",
    "HookName",
    "Message",
    "Outcome",
    "OverlayRelease",
    "PacketEpisode",
    "Patch",
    "RuntimeSignals",
    "SignedEnvelope",
    "Snippet",
    "Step",
    "TargetRef",
    "TaskRef",
    "TaskSpec",
    "Termination",
    "Timings",
    "Trajectory",
    "UnsupportedSchemaVersion",
    "check_schema_version",
]
