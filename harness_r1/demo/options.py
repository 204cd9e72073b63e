"""What a demo run is asked to do (`DemoOptions`), what it may be given instead of building it
(`DemoParts`), and what it found (`DemoResult`): plain objects, no behaviour."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness_r1.contracts import Trajectory
from harness_r1.daemon.store import CandidateRow

#: The demo fleet's pool (release target).
FLEET = "demo-fleet"
#: The gate's fewest batch tasks and the live guard's fewest episodes per arm in the demo (the
#: daemon's defaults are 8 and 20): demo-sized, printed with the result.
DEMO_MIN_BATCH = 2
DEMO_MIN_GUARD_EPISODES = 4


@dataclass(frozen=True)
class DemoOptions:
    """The knobs of `harness-r1 demo` (its --help lists them).

    The defaults are sized for 2 CPU cores and the deployed agent (SmolLM2-135M with its shipped
    adapter, models/deployed.py): WebShop's held-out goals 40-59 (the agent trained on
    goals 0-39), 4 agents x 2 episodes a phase (8 tasks, the same tasks and seeds in every
    phase, so the success per round is paired), 6 steps an episode, K=3 candidates, the gate's
    advisory profile (the model decides). The live guard promotes at
    P(better) >= 0.9 here (the daemon's default is 0.99): with a cohort of one to three agents
    playing two episodes each per phase, 0.99 takes many phases even for a +25% gain (2/6 vs
    0/6 gives 0.90, 4/18 vs 0/18 gives 0.98), and the demo's overlay has already passed the
    canary's gate. The setting is printed with the result.
    """

    env: str = "webshop"
    split: str = "fixed_heldout"  # goals 40-59: the deployed agent never trained on them
    agents: int = 4
    episodes_per_agent: int = 2
    rounds: int = 2
    max_steps: int = 6
    k: int = 3
    guard_tasks: int = 2  # the gate's regression tasks per canary (other tasks of the split)
    guard_phases: int = 3  # fleet phases the live guard may watch per round before moving on
    promote_probability: float = 0.9
    budget_s: float = 900.0  # a phase that would start after this is skipped (summary still made)
    # the gate's attribution profile: advisory holds candidates to advice (forced share <= 0.1,
    # nothing won without the model) and the template teacher to advisory templates
    profile: Literal["default", "advisory"] = "advisory"
    release_wait_s: float = 120.0  # how long agents get to apply a release or a rollback
    out: Path | None = None  # the run folder (default runs/demo-<UTC time>)

    def __post_init__(self) -> None:
        if self.agents < 2:
            raise ValueError("the demo needs at least 2 agents (a cohort and a control group)")
        for name in ("episodes_per_agent", "rounds", "max_steps", "k", "guard_phases"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.profile not in ("default", "advisory"):
            raise ValueError(f"profile must be default or advisory, got {self.profile!r}")
        if self.guard_tasks < 0 or self.budget_s <= 0:
            raise ValueError("guard_tasks must be >= 0 and budget_s > 0")

    @property
    def phase_episodes(self) -> int:
        return self.agents * self.episodes_per_agent

    def describe(self) -> str:
        """The run's size and its demo-specific decision settings, for the summary."""
        return (
            f"{self.agents} agents x {self.episodes_per_agent} episodes a phase on {self.env}, "
            f"{self.max_steps} steps, K={self.k}; gate: {self.profile} profile, batch >= "
            f"{DEMO_MIN_BATCH} tasks, "
            f"{self.guard_tasks} regression tasks; live guard: >= {DEMO_MIN_GUARD_EPISODES} "
            f"episodes per arm, promotes at P(better) >= {self.promote_probability} (the "
            "Bayesian rule; the daemon's default is mSPRT at alpha 0.05)"
        )


@dataclass(frozen=True)
class DemoParts:
    """What the demo can be given instead of building it (tests give named stand-ins for the
    two models; the demo itself uses the embedded SmolLM2 and the template teacher).

    canary_for(env, progress) returns the daemon's canary for env, reporting its episodes to
    `progress` (a `sandbox.canary.CanaryProgress`)."""

    policy: Any = None  # the fleet's frozen target (a Policy)
    canary_for: Callable[[str, Any], Any] | None = None
    proposer: Any = None  # the engineer (a PatchWriter)


@dataclass
class GuardWatch:
    """The live guard on one round's release, as the demo saw it."""

    overlay_id: str
    cohort: list[str]
    episodes: list[Trajectory] = field(default_factory=list)
    state: str = "canary"  # the overlay's registry state when the demo moved on
    decision: str = ""  # the guard's reason, from the registry's events
    propagation_s: float | None = None  # promotion: full release until every agent ran it


@dataclass
class RoundResult:
    """One improvement round: the fleet on the incumbent, its failures through the daemon, and
    the live guard on what the gate promoted."""

    number: int
    incumbent: str  # overlay id, or "base"
    fleet: list[Trajectory] = field(default_factory=list)
    batch_id: str | None = None
    batch_state: str | None = None
    stale_batches: int = 0  # sealed from failures of a harness no longer live: not judged
    candidates: list[CandidateRow] = field(default_factory=list)
    # candidate id -> (forced share, patch-alone success) from the stored canary report
    attribution: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    promoted: str | None = None  # the overlay the gate promoted (released to a cohort)
    guard: GuardWatch | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    note: str = ""  # why the round ended early, when it did


@dataclass
class RollbackResult:
    command: list[str]
    to: str
    returncode: int
    command_s: float  # the CLI process, start to exit
    propagation_s: float | None  # command start until every agent ran `to`
    agents_on: dict[str, str] = field(default_factory=dict)
    registry_state: str = ""


@dataclass
class DemoResult:
    run_dir: Path
    rounds: list[RoundResult]
    final: list[Trajectory]  # the fleet on the last incumbent
    final_incumbent: str
    rollback: RollbackResult | None
    win_rate: dict[str, float]  # harness_r1_patch_win_rate by env, scraped from /metrics
    metrics_url: str
    seconds: dict[str, float]
    report_html: Path | None = None
    plot_png: Path | None = None
    note: str = ""
