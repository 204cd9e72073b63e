"""The agent: what an operator embeds to run a deployed agent of their own.

One import place for it: `build_agent(settings, policy, env, agent_id=...)` assembles the
harness runtime around the operator's policy (a `harness_r1.models.Policy`, a plain function
`messages -> reply` through `callable_policy`, or an OpenAI-compatible endpoint through
`openai_policy`) on an env by name, the overlay client that verifies signed releases and
applies them at episode boundaries, hooks in the isolated worker, and the publisher of its
trajectories to the daemon. docs/embedding.md walks through it; examples/embedding/ runs it.
The names a policy or a caller of `run` meets (the Policy protocol, its requests and replies,
PolicyError, TaskSpec, Trajectory) are re-exported here, so an embedding imports from here
alone.

Modules:
- build.py: `build_agent`: the one place a deployed agent is assembled from settings, a policy
  and an env
- embedded.py: An embedded agent: what an operator holds after `build_agent`, and all they need
  to call
- policies.py: The operator's own model as the runtime's `Policy`: a plain function, or an
  OpenAI-compatible endpoint
- publishing.py: Where an embedded agent's trajectories go: the daemon's trajectory topic, one
  acknowledged record per finished episode
"""

from typing import TYPE_CHECKING

from harness_r1.contracts import TaskSpec, Trajectory
from harness_r1.exports import lazy_exports
from harness_r1.models import ChatMessage, Generation, GenerationRequest, Policy, PolicyError

if TYPE_CHECKING:
    from harness_r1.agent.build import build_agent
    from harness_r1.agent.embedded import Agent, Work
    from harness_r1.agent.policies import (
        CallablePolicy,
        PolicyLike,
        Responder,
        as_policy,
        callable_policy,
        openai_policy,
    )
    from harness_r1.agent.publishing import TrajectoryPublisher

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "Agent",
    "CallablePolicy",
    "ChatMessage",
    "Generation",
    "GenerationRequest",
    "Policy",
    "PolicyError",
    "PolicyLike",
    "Responder",
    "TaskSpec",
    "Trajectory",
    "TrajectoryPublisher",
    "Work",
    "as_policy",
    "build_agent",
    "callable_policy",
    "openai_policy",
]
