"""The harness runtime: the episode loop, the four hooks and their effects, the policies.

The runtime takes a HookSet (a protocol) and never imports the sandbox.

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
- policies/: Frozen target agents (policies): the protocol and its backends
"""

from harness_r1.harness.episode import EpisodeSpec
from harness_r1.harness.hooks import HookCall, HookSet, InProcessHooks, NoHooks
from harness_r1.harness.runtime import HarnessRuntime, RunCancelled, RunConfig

__all__ = [
    "EpisodeSpec",
    "HarnessRuntime",
    "HookCall",
    "HookSet",
    "InProcessHooks",
    "NoHooks",
    "RunCancelled",
    "RunConfig",
]
