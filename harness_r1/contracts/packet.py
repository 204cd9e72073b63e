"""FailurePacket: what the engineer reads. Deterministic: same trajectories, same bytes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from harness_r1.contracts.base import Contract, Message
from harness_r1.contracts.hooks import HookName
from harness_r1.contracts.trajectory import TargetRef, Termination


class IncumbentHook(Contract):
    """One hook of the live overlay the batch ran under, as the engineer reads it."""

    hook: HookName
    links: int = Field(ge=1, description="How many links of the incumbent's chain run here.")
    code: str = Field(
        description="Each link's source, oldest first, after a `# link N of M` line; cut to "
        "the packet's budget with the marker ` ...[N chars cut]`."
    )


class RuntimeSignals(Contract):
    """Counted symptoms over the selected episodes (rules: harness_r1/consumers/signals.py)."""

    repeated_actions: int = 0
    invalid_actions: int = 0
    nothing_happens: int = 0
    empty_sql_results: int = 0
    sql_errors: int = 0
    step_limit_hits: int = 0
    loops: int = 0
    hook_faults: int = 0


class Snippet(Contract):
    """One step near an episode's failure point, texts trimmed with a visible cut marker."""

    step: int = Field(description="Step index in the episode (0-based).")
    action: str = Field(description="The action sent to the environment.")
    observation: str = Field(description="The environment's answer to that action (feedback).")
    flags: list[str] = Field(
        default_factory=list,
        description="Symptoms of this step: repeated, invalid, nothing_happens, empty_sql_result, "
        "sql_error, hook_fault.",
    )


class PacketEpisode(Contract):
    masked_task_id: str = Field(
        description="Stable alias (T1, T2...) so patches cannot hard-code ids."
    )
    task_type: str
    instruction: str
    constraints: list[str] = Field(default_factory=list)
    success: bool
    reward: float
    termination: Termination
    steps: int
    snippets: list[Snippet]
    failure_step: int | None = Field(
        default=None,
        description="The failure point: first step of the longest streak of repeated/invalid "
        "actions, or the last step when there is none (None for an episode without steps).",
    )
    failure_streak: int = Field(
        default=0, ge=0, description="Length of that streak (0: no streak, last steps shown)."
    )


class FailurePacket(Message):
    packet_id: str = Field(description="sha256 of the packet content without this field.")
    env: str
    target: TargetRef
    harness_version: str
    selection: Literal["round_robin", "lowest_reward"]
    token_budget: int = Field(ge=1)
    episodes: list[PacketEpisode]
    signals: RuntimeSignals
    batch_size: int = Field(ge=0, description="Episodes in the batch the packet was drawn from.")
    failures: int = Field(ge=0)
    incumbent: list[IncumbentHook] = Field(
        default_factory=list,
        description="The hooks already live (the batch's harness): a new patch is added to "
        "them, or replaces one explicitly. Empty on the base harness.",
    )
    rules: Literal["env", "generic"] = Field(
        default="env",
        description="Which extraction rules made this packet. `env`: rules written for this "
        "env (its invalid-action answer, the constraints its instructions state). `generic`: "
        "none are known for this env (a plugin's): invalid actions are recognised by the "
        "generic markers only and no task constraints are extracted.",
    )

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An empty incumbent and the env's own rules are left out: packets of the base harness
        on a built-in env keep their bytes and packet_id."""
        data: dict[str, Any] = handler(self)
        if not self.incumbent:
            data.pop("incumbent", None)
        if self.rules == "env":
            data.pop("rules", None)
        return data
