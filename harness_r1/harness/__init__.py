"""The harness runtime: the episode loop, the four hooks and their effects, the policies.

The runtime takes a HookSet (a protocol) and never imports the sandbox.
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
