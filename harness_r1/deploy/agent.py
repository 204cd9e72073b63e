"""A deployed agent: the harness runtime driven under the overlay client's leases.

What an operator embeds next to a frozen target: tasks come in, each lockstep batch of
episodes runs under the overlay in force when the batch starts (one lease per batch, so an
episode never mixes overlays), every trajectory carries that overlay's id, and each finished
trajectory is handed to a sink (the trajectory topic in production).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness_r1.contracts import TaskSpec, Trajectory
from harness_r1.deploy.client import OverlayClient
from harness_r1.harness import EpisodeSpec, HarnessRuntime

TrajectorySink = Callable[[Trajectory], None]


class DeployedAgent:
    def __init__(
        self,
        runtime: HarnessRuntime,
        client: OverlayClient,
        sink: TrajectorySink | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.sink = sink
        self.batch_size = max(1, batch_size or runtime.config.lockstep or 1)

    def run(self, work: Sequence[tuple[TaskSpec, int]]) -> list[Trajectory]:
        """Run (task, seed) pairs in batches; a new overlay applies from the next batch."""
        out: list[Trajectory] = []
        for start in range(0, len(work), self.batch_size):
            batch = work[start : start + self.batch_size]
            with self.client.lease() as lease:
                specs = [
                    EpisodeSpec(task=task, seed=seed, hooks=lease.hooks) for task, seed in batch
                ]
                out.extend(self.runtime.run(specs, on_done=self.sink))
        return out
