"""Canary results: what a candidate patch did to the frozen target on a paired batch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness_r1.contracts.attribution import OriginCounts
from harness_r1.contracts.base import Contract, Message
from harness_r1.contracts.trajectory import TargetRef


class PairedTask(Contract):
    task_id: str
    seed: int
    base_success: bool
    patched_success: bool
    base_reward: float
    patched_reward: float


class CandidateCost(Contract):
    episodes: int = 0
    steps: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0


class PatchAlone(Contract):
    """The candidate's overlay (composed onto the incumbent) run under the null policy
    (harness/policies/null.py) on the same tasks and seeds: what the harness wins without the
    model. Above 0, the patch plays (part of) the task itself."""

    tasks: int = Field(ge=0)
    successes: int = Field(ge=0)
    origins: OriginCounts = Field(default_factory=OriginCounts)

    @property
    def success_rate(self) -> float:
        return self.successes / self.tasks if self.tasks else 0.0


class CandidateResult(Message):
    candidate_id: str
    patch_sha256: str | None = Field(description="The candidate's own patch (its link).")
    composed_sha256: str | None = Field(
        default=None,
        description="The overlay that ran: the candidate composed onto the incumbent.",
    )
    status: Literal["evaluated", "invalid", "infra_error"]
    invalid_reason: str | None = Field(default=None, description="Stable code + message.")
    pairs: list[PairedTask] = Field(default_factory=list)
    delta_success: float | None = None
    delta_mean_reward: float | None = None
    delta_interval: tuple[float, float] | None = Field(
        default=None, description="Paired bootstrap 95% interval of the success delta."
    )
    sandbox_events: dict[str, int] = Field(
        default_factory=dict, description="Hook faults by reason plus worker restarts/refusals."
    )
    applied_effects: dict[str, int] = Field(
        default_factory=dict,
        description="Hook effects applied by kind over the patched episodes (e.g. how many steps "
        "the patch forced rather than the model deciding).",
    )
    origins: OriginCounts = Field(
        default_factory=OriginCounts,
        description="The patched episodes' steps by who decided the action (forced_share).",
    )
    patch_alone: PatchAlone | None = Field(
        default=None,
        description="The model-free control: the overlay under the null policy (None: not "
        "run, or its episodes kept failing).",
    )
    cost: CandidateCost = Field(default_factory=CandidateCost)
    reward: float | None = Field(
        default=None,
        description="Training reward: delta success; invalid -> configured value; "
        "infrastructure failure -> None (never a reward).",
    )

    @property
    def forced_share(self) -> float | None:
        """Share of the patched episodes' steps a hook forced (None: nothing ran)."""
        return self.origins.measured_forced_share

    @property
    def patch_alone_success(self) -> float | None:
        return self.patch_alone.success_rate if self.patch_alone is not None else None


class CanaryReport(Message):
    batch_id: str
    env: str
    target: TargetRef
    tasks: int
    incumbent_overlay_id: str = Field(
        default="base",
        description="What the baseline ran and every candidate was composed onto.",
    )
    baseline_cached: bool
    baseline_success_rate: float
    baseline_cost: CandidateCost
    baseline_origins: OriginCounts = Field(
        default_factory=OriginCounts,
        description="The incumbent's episodes' steps by who decided the action.",
    )
    candidates: list[CandidateResult]
    control: CandidateResult | None = Field(
        default=None,
        description="The batch re-run with the incumbent among the candidates: pairing noise.",
    )
