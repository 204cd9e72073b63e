"""The demo's deployed agents: one frozen target shared by all (as one inference server would
serve them: concurrent calls batched, `harness/policies/shared.py`), each agent in its own
thread, built by `harness_r1.agent.build_agent` as an operator's agent is (its own signed
overlay client, hooks in the isolated worker, its trajectories published to the daemon).

Every phase plays the same tasks with the same seeds (task j, seed j), so the fleet's success on
one harness and on the next is a paired comparison; which agent plays which task rotates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness_r1.contracts import TaskSpec, Trajectory
from harness_r1.demo.options import FLEET, DemoOptions
from harness_r1.harness.policies import SharedPolicy

if TYPE_CHECKING:
    from harness_r1.agent import Agent
    from harness_r1.daemon.settings import Settings


class Fleet:
    def __init__(self, agents: list[Agent], tasks: list[TaskSpec], target: SharedPolicy) -> None:
        self.agents = agents
        self.tasks = tasks
        self.target = target
        self.phases = 0

    @property
    def ids(self) -> list[str]:
        return [a.agent_id for a in self.agents]

    def overlays(self) -> dict[str, str]:
        """agent id -> the overlay it runs now."""
        return {a.agent_id: a.active_overlay_id for a in self.agents}

    def on(self, overlay_id: str) -> list[str]:
        return [agent for agent, active in self.overlays().items() if active == overlay_id]

    def play(self) -> list[Trajectory]:
        """Every agent plays its share of the tasks under the overlay it runs now, all agents
        at once (each in its own thread, their model calls batched by the shared target).
        Task j always has seed j; the shares rotate from phase to phase, so a cohort of one
        agent meets every task over as many phases as there are agents."""
        n = len(self.agents)
        turn, self.phases = self.phases, self.phases + 1
        shares = [
            [(task, j) for j, task in enumerate(self.tasks) if j % n == (index + turn) % n]
            for index in range(n)
        ]
        self.target.callers(n)

        def run(index: int) -> list[Trajectory]:
            try:
                return self.agents[index].run(shares[index])
            finally:
                self.target.leave()

        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="agent")
        try:
            futures = [pool.submit(run, i) for i in range(n)]
            return [t for future in futures for t in future.result()]
        except BaseException:
            # Ctrl-C or SIGTERM mid-phase (or an agent failed): the agents stop at their next
            # model call. A `with` pool would wait for every agent's whole share first, and
            # the interpreter joins pool threads at exit: the demo outlived its 5 s to stop.
            self.target.stop()
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def wait_until(
        self, check: Callable[[dict[str, str]], bool], timeout_s: float, tick_s: float = 0.05
    ) -> float | None:
        """Seconds until `check(agent -> overlay)` held, or None after `timeout_s`."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if check(self.overlays()):
                return time.monotonic() - started
            time.sleep(tick_s)
        return None

    def close(self) -> None:
        self.target.stop()  # an agent thread still playing ends at its next model call
        for agent in self.agents:
            agent.close()


def build_fleet(
    options: DemoOptions,
    settings: Settings,
    producer: Any,
    work: Path,
    policy: Any,
    on_trajectory: Callable[[Trajectory], None],
) -> Fleet:
    """`options.agents` agents on `policy`, all in the pool FLEET, each with its state under
    `work/agents/<id>` and the demo's key directory as trusted keys; each finished trajectory
    is published to the trajectory topic (on the demo's one producer) and handed to
    `on_trajectory` (the phase's progress bar)."""
    from harness_r1.agent import build_agent
    from harness_r1.deploy import Keyring

    target = SharedPolicy(policy)
    keyring = Keyring.from_directory(work / "keys")
    agents: list[Agent] = []
    try:
        for i in range(options.agents):
            name = f"agent-{i}"
            agents.append(
                build_agent(
                    settings,
                    target,
                    options.env,
                    agent_id=name,
                    target=FLEET,
                    keys=keyring,
                    state_dir=work / "agents" / name,
                    lockstep=options.episodes_per_agent,
                    max_steps=options.max_steps,
                    history_turns=3,
                    on_trajectory=on_trajectory,
                    producer=producer,
                )
            )
    except BaseException:
        for agent in agents:
            agent.close()
        raise
    tasks = agents[0].tasks(options.split, options.phase_episodes)
    return Fleet(agents, tasks, target)
