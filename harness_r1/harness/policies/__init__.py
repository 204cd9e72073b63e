"""The runtime's policies: the target a run is built with, and the policies that run no model.

The model backends (transformers, the OpenAI-compatible client, the deployed agent) and the
Policy protocol they implement live in `harness_r1.models`, which the trainer's engineers use
too; this package picks one of them for a run (`build_policy` from a `PolicySpec`) and holds
the policies that stand in for a model (null, scripted) or share one (shared). The protocol's
names are re-exported here for the runtime's callers.

Public names load on first use (`harness_r1.exports`): building a policy loads its backend only
when it is called.

Modules:
- factory.py: Build a policy from a plain spec (the CLI and the daemon read settings, then call
  this)
- null.py: The null policy: a target that never produces a useful action (the canary's
  patch-alone control)
- scripted.py: A deterministic policy for tests and dry runs (a test double for a model, named as
  such)
- shared.py: One frozen target serving several agents at once, as an inference server does
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports
from harness_r1.models import (
    ChatMessage,
    Generation,
    GenerationRequest,
    Policy,
    PolicyError,
    SamplingConfig,
)

if TYPE_CHECKING:
    from harness_r1.harness.policies.factory import PolicySpec, build_policy
    from harness_r1.harness.policies.null import NULL_OUTPUT, NullPolicy
    from harness_r1.harness.policies.scripted import ScriptedPolicy
    from harness_r1.harness.policies.shared import SharedPolicy

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "ChatMessage",
    "Generation",
    "GenerationRequest",
    "NULL_OUTPUT",
    "NullPolicy",
    "Policy",
    "PolicyError",
    "PolicySpec",
    "SamplingConfig",
    "ScriptedPolicy",
    "SharedPolicy",
    "build_policy",
]
