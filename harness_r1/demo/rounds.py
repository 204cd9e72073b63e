"""The demo's choreography: improvement rounds that build on each other, then an operator
rollback through the control topic.

Round r (incumbent I: the pool's live overlay, base at first):
1. the fleet plays its tasks on I (every agent runs I);
2. the batch window of I's failures ends (`ImprovementLoop.seal_now`): the oldest B of them
   (the cohort's during the last live guard, then this phase's) become the round's batch; the
   template teacher proposes K patches, the canary runs each composed onto I against I, the
   gate decides. Failures of harnesses no longer live (the last guard's control arm) stay in
   their buffers; were their window to end, the daemon would finish them as stale, unjudged;
3. a promoted overlay goes to a canary cohort; the fleet plays again (cohort on the new overlay,
   the rest on I) until the live guard promotes or rolls it back (at most `guard_phases`);
4. a promotion goes to every agent: the next round's incumbent.
After the rounds the fleet plays once more on the last incumbent (success after the last
round), and the operator rolls the pool back to round 1's overlay with
`harness-r1 overlay rollback --to ...` in a separate process; the demo times how long the fleet
takes to obey.

Phases run one after another (2 CPU cores: the agents wait while the canary uses the model).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness_r1.contracts import BASE_HARNESS, Trajectory, format_share
from harness_r1.demo.fleet import Fleet
from harness_r1.demo.narration import CanaryRelay, Narrator, PhaseBar
from harness_r1.demo.options import (
    FLEET,
    DemoOptions,
    GuardWatch,
    RollbackResult,
    RoundResult,
)

if TYPE_CHECKING:
    from harness_r1.daemon import Daemon

#: Batch states that end a batch's run through the daemon.
FINISHED = ("done", "failed", "stale")
#: After a guard phase: how long the live guard (a 1 s scheduler job) gets to read the phase.
GUARD_TICK_WAIT_S = 2.5


class Choreography:
    def __init__(
        self,
        options: DemoOptions,
        daemon: Daemon,
        fleet: Fleet,
        narrator: Narrator,
        relay: CanaryRelay,
        config_path: Path,
        deadline: float,
    ) -> None:
        self.options = options
        self.daemon = daemon
        self.store = daemon.store
        self.registry = daemon.loop.registry
        self.fleet = fleet
        self.say = narrator.say
        self.narrator = narrator
        self.relay = relay
        self.config_path = config_path
        self.deadline = deadline
        self.trajectory_bar: PhaseBar | None = None

    # -- time -----------------------------------------------------------------------------

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def _wait(self, check: Callable[[], bool], timeout_s: float, tick_s: float = 0.2) -> bool:
        """Poll `check()` until true, the timeout or the demo's budget, whichever is first."""
        end = time.monotonic() + max(0.0, min(timeout_s, self.left()))
        while True:
            if check():
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(tick_s)

    # -- phases -----------------------------------------------------------------------------

    def play(self, name: str) -> list[Trajectory]:
        """The whole fleet plays its tasks once; the daemon has stored them when this returns."""
        stored_before = self.store.trajectory_count()
        with self.narrator.phase(name, total=self.options.phase_episodes) as bar:
            self.trajectory_bar = bar
            try:
                played = self.fleet.play()
            finally:
                self.trajectory_bar = None
            bar.status("waiting for the daemon to store them")
            self._wait(lambda: self.store.trajectory_count() >= stored_before + len(played), 60)
        wins = sum(t.outcome.success for t in played)
        by_overlay: dict[str, list[Trajectory]] = {}
        for t in played:
            by_overlay.setdefault(t.harness_version, []).append(t)
        split = ", ".join(
            f"{sum(t.outcome.success for t in ts)}/{len(ts)} on {v}"
            for v, ts in sorted(by_overlay.items())
        )
        self.say(f"  {wins}/{len(played)} succeeded ({split})")
        return played

    def on_trajectory(self, trajectory: Trajectory) -> None:
        if self.trajectory_bar is not None:
            self.trajectory_bar.advance()

    def improve(self, result: RoundResult) -> None:
        """End the batch window, then follow the daemon from the sealed batch to the gate."""
        sealed = self.daemon.loop.seal_now(self.options.env, result.incumbent)
        if not sealed:
            result.note = "no failures to improve on"
            return
        name = f"round {result.number} · canary (K={self.options.k}, on {result.incumbent})"
        with self.narrator.phase(name) as bar:
            self.relay.bar = bar
            try:
                bar.status("packet -> proposals")
                finished = self._wait(
                    lambda: all(self.store.batch_state(b) in FINISHED for b in sealed),
                    self.left(),
                )
            finally:
                self.relay.bar = None
        states = {b: self.store.batch_state(b) for b in sealed}
        result.stale_batches = sum(s == "stale" for s in states.values())
        judged = [b for b, s in states.items() if s != "stale"]
        if result.stale_batches:
            self.say(
                f"  {result.stale_batches} batch(es) of failures under a harness no longer live:"
                " finished as stale, not judged"
            )
        if not finished:
            result.note = "the time budget ran out during the canary"
        if not judged:
            result.note = result.note or "every sealed batch was stale"
            return
        result.batch_id = judged[-1]
        result.batch_state = states[result.batch_id]
        result.candidates = self.store.canary_results(result.batch_id)
        report = self.store.canary_report(result.batch_id)
        if report is not None:
            result.attribution = {
                c.candidate_id: (c.forced_share, c.patch_alone_success) for c in report.candidates
            }
        result.promoted = next((r.overlay_id for r in result.candidates if r.overlay_id), None)
        for row in result.candidates:
            delta = "-" if row.delta_success is None else f"{row.delta_success:+.3f}"
            forced, alone = result.attribution.get(row.candidate_id, (None, None))
            self.say(
                f"  {row.candidate_id}: {row.status}, delta {delta}, forced share "
                f"{format_share(forced)}, patch alone {format_share(alone)}, gate "
                f"{row.gate_verdict}"
            )

    def guard(self, result: RoundResult) -> None:
        """The promoted overlay on a cohort while the live guard watches."""
        overlay = result.promoted
        assert overlay is not None
        self._wait(lambda: bool(self.fleet.on(overlay)), self.options.release_wait_s)
        watch = GuardWatch(overlay_id=overlay, cohort=self.fleet.on(overlay))
        result.guard = watch
        if not watch.cohort:
            self.say(f"  [red]no agent applied {overlay} within the wait[/red]")
        self.say(f"release {overlay} to a canary cohort: {', '.join(watch.cohort) or 'nobody'}")
        for phase in range(1, self.options.guard_phases + 1):
            if self.left() <= 0:
                result.note = "the time budget ran out while the live guard watched"
                break
            label = f"round {result.number} · live guard, phase {phase}"
            watch.episodes += self.play(label)
            self._wait(lambda: self._state(overlay) != "canary", GUARD_TICK_WAIT_S)
            if self._state(overlay) != "canary":
                break
        watch.state = self._state(overlay)
        watch.decision = self._decision(overlay)
        self.say(f"  live guard: {overlay} is {watch.state} ({watch.decision or 'undecided'})")
        if watch.state == "active":
            watch.propagation_s = self.fleet.wait_until(
                lambda on: set(on.values()) == {overlay}, self.options.release_wait_s
            )
            took = "-" if watch.propagation_s is None else f"{watch.propagation_s:.1f} s"
            self.say(f"  promoted to every agent ({took} after the guard's decision)")

    def _state(self, overlay_id: str) -> str:
        return self.registry.get(overlay_id).state.value

    def _decision(self, overlay_id: str) -> str:
        events = [e for e in self.registry.events(overlay_id) if e.actor == "live_guard"]
        return events[-1].reason if events else ""

    # -- the round and the whole run ----------------------------------------------------------

    def round(self, number: int, incumbent: str) -> RoundResult:
        result = RoundResult(number=number, incumbent=incumbent)
        started = time.monotonic()
        result.fleet = self.play(f"round {number} · fleet on {incumbent}")
        result.seconds["fleet"] = time.monotonic() - started
        mark = time.monotonic()
        self.improve(result)
        result.seconds["canary"] = time.monotonic() - mark
        if result.promoted is not None and not result.note:
            mark = time.monotonic()
            self.guard(result)
            result.seconds["live guard"] = time.monotonic() - mark
        return result

    def rollback(self, rounds: list[RoundResult]) -> RollbackResult | None:
        """The operator takes the pool back to round 1's overlay (or to base when round 1's
        overlay is what runs now) through the control topic, from a separate process."""
        promoted = [r.guard.overlay_id for r in rounds if r.guard and r.guard.state == "active"]
        if not promoted:
            return None
        to = promoted[0] if len(promoted) > 1 else BASE_HARNESS
        command = [
            *harness_r1_command(),
            "--config",
            str(self.config_path),
            "overlay",
            "rollback",
            "--target",
            FLEET,
            "--to",
            to,
            "--actor",
            "demo-operator",
            "--reason",
            "demo: operator rollback",
        ]
        self.say("operator: " + " ".join(["harness-r1", *command[len(harness_r1_command()) :]]))
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        command_s = time.monotonic() - started
        if done.returncode != 0:
            self.say(f"[red]the rollback command failed ({done.returncode})[/red]")
            sys.stderr.write(done.stdout + done.stderr)
        remaining = max(0.0, self.options.release_wait_s - command_s)
        waited = self.fleet.wait_until(lambda on: set(on.values()) == {to}, remaining)
        propagation = None if waited is None else command_s + waited
        result = RollbackResult(
            command=["harness-r1", *command[len(harness_r1_command()) :]],
            to=to,
            returncode=done.returncode,
            command_s=command_s,
            propagation_s=propagation,
            agents_on=self.fleet.overlays(),
        )
        self._wait(lambda: to == BASE_HARNESS or self._state(to) == "active", 10)
        result.registry_state = "base" if to == BASE_HARNESS else self._state(to)
        took = "not within the wait" if propagation is None else f"in {propagation:.1f} s"
        self.say(
            f"  the fleet runs {to} again: every agent {took} (the command took {command_s:.1f} s)"
        )
        return result


def harness_r1_command() -> list[str]:
    """The CLI as a separate process: the console script beside this interpreter, else -m."""
    script = Path(sys.executable).parent / "harness-r1"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "harness_r1.cli.app"]
