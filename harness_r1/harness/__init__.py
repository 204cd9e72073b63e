"""The harness runtime: the episode loop, the four hooks and their effects, the policies.

The runtime takes a HookSet (a protocol) and never imports the sandbox; the model it drives is
a `harness_r1.models.Policy`.

Modules:
- context.py: The read-only snapshot a hook receives (`ctx`), built from the episode's running
  counters
- effects.py: Parse what a hook returned into one allowed effect, or say why it is junk
- episode.py: One episode's mutable state and the hook calls around it (no model, no batching
  here)
- evaluation.py: Success rates with Wilson 95% intervals, per env and task type (eval and
  benchmarks)
- hooks.py: How the runtime calls hooks: a HookSet protocol with an in-process implementation
- refine.py: Self-Refine, the prompt-level baseline the Harness-R1 paper compares against: the
  target reads its own failed episode, says what went ...
- runtime.py: The episode loop: ONE code path for deployed agents and for the canary
- tasks.py: Choosing tasks for a run: deterministic, spread over the split (registries list
  tasks sorted by type, so the first N would all be one type)
- policies/: The runtime's policies: the target a run is built with, and the policies that run
  no model
"""

from harness_r1.harness.context import HISTORY_IN_CTX, EpisodeView
from harness_r1.harness.effects import (
    CONTROL_MARKERS,
    MAX_EFFECT_TEXT,
    MAX_SKILLS,
    MAX_SKILLS_CHARS,
    MAX_STATE_BYTES,
    JunkResult,
    parse_start_effects,
    parse_step_effect,
)
from harness_r1.harness.episode import EpisodeSpec
from harness_r1.harness.evaluation import summarize, wilson_interval
from harness_r1.harness.hooks import HookCall, HookSet, InProcessHooks, NoHooks
from harness_r1.harness.refine import self_refine
from harness_r1.harness.runtime import GenerationRecord, HarnessRuntime, RunCancelled, RunConfig
from harness_r1.harness.tasks import spread

__all__ = [
    "CONTROL_MARKERS",
    "EpisodeSpec",
    "EpisodeView",
    "GenerationRecord",
    "HISTORY_IN_CTX",
    "HarnessRuntime",
    "HookCall",
    "HookSet",
    "InProcessHooks",
    "JunkResult",
    "MAX_EFFECT_TEXT",
    "MAX_SKILLS",
    "MAX_SKILLS_CHARS",
    "MAX_STATE_BYTES",
    "NoHooks",
    "RunCancelled",
    "RunConfig",
    "parse_start_effects",
    "parse_step_effect",
    "self_refine",
    "spread",
    "summarize",
    "wilson_interval",
]
