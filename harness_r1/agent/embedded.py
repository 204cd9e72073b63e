"""An embedded agent: what an operator holds after `build_agent`, and all they need to call.

Why a class over `deploy.DeployedAgent`: the deployed agent is the mechanism (the runtime under
the overlay client's leases, a sink per trajectory); an operator also needs the env's tasks by
split, one object to close (hook workers, the client's reader thread, the producer it owns),
plain tasks without seeds, and how publishing went. The rules stay where they are: swaps at
episode boundaries (`deploy/client.py`), hooks in the isolated worker (`sandbox`), one episode
loop for agents and canary (`harness/runtime.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from harness_r1.agent.publishing import TrajectoryPublisher
from harness_r1.contracts import TaskSpec, Trajectory
from harness_r1.deploy import DeployedAgent
from harness_r1.envs import EnvSuite
from harness_r1.harness import spread

#: What `Agent.run` takes: tasks (each plays with its position in the list as seed) or
#: (task, seed) pairs (the seed seeds the env's reset and the model's sampling, and is
#: recorded, so the daemon's canary replays the same episode).
Work = Iterable[TaskSpec | tuple[TaskSpec, int]]


class Agent:
    """A deployed agent: plays tasks under the overlay in force, publishes what it played.

    `run` plays episodes in lockstep batches of `lockstep` (1 by default): each batch takes
    the overlay in force when it starts and keeps it to its end, so a verified release applies
    from the next batch on and no episode mixes two overlays. Every finished trajectory
    carries the overlay's id (`harness_version`), is published to the trajectory topic, then
    handed to `on_trajectory`.

    A `PolicyError` (the model failed) ends the `run` call: the episodes under way are dropped
    (never published: an outage is not the agent's failure, and must not reach the daemon's
    failure batches); those finished before it were published. The agent stays usable: the
    next `run` starts afresh.
    """

    def __init__(
        self,
        deployed: DeployedAgent,
        suite: EnvSuite,
        data_root: Path,
        publisher: TrajectoryPublisher,
    ) -> None:
        self.deployed = deployed
        self.suite = suite
        self.data_root = data_root
        self.publisher = publisher
        self._closed = False

    @property
    def agent_id(self) -> str:
        return self.deployed.client.config.agent_id

    @property
    def target(self) -> str:
        """The agent pool this agent takes releases and control commands for."""
        return self.deployed.client.config.target

    @property
    def env(self) -> str:
        return self.suite.name

    @property
    def active_overlay_id(self) -> str:
        """The overlay the next batch of episodes starts under (`base`: none)."""
        return self.deployed.client.active_overlay_id

    def tasks(self, split: str, limit: int | None = None, offset: int = 0) -> list[TaskSpec]:
        """The env's tasks of `split` (`limit` of them evenly spread over it, starting at
        `offset`): the split's order is by task type, so the first N would all be one type."""
        return spread(self.suite.load_tasks(self.data_root, split), limit, offset)

    def run(self, work: Work) -> list[Trajectory]:
        """Play every task; trajectories come back in the order given."""
        if self._closed:
            raise RuntimeError(f"agent {self.agent_id} is closed")
        pairs = [item if isinstance(item, tuple) else (item, i) for i, item in enumerate(work)]
        for task, _seed in pairs:
            if task.env != self.env:
                raise ValueError(
                    f"task {task.task_id} is a {task.env} task; agent {self.agent_id} plays "
                    f"{self.env}"
                )
        return self.deployed.run(pairs)

    def sync(self, timeout_ms: int = 0) -> int:
        """Read the release and control topics now (the client also does so in the
        background): returns the messages read. For a caller that wants the newest overlay
        before its first episode."""
        return self.deployed.client.sync(timeout_ms)

    def close(self) -> None:
        """Stop reading releases, end the hook workers, close the envs and the producer built
        for this agent. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.deployed.client.close()
            self.deployed.runtime.close()
        finally:
            self.publisher.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
