"""Fixed trajectories for the golden CLI outputs (benchmarks/golden_cli.sh): 4 dbbench and 4
webshop episodes of a scripted (junk-answering) target, 3 steps each.

    .venv/bin/python benchmarks/golden_trajectories.py OUT.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig, spread
from harness_r1.harness.policies import ScriptedPolicy

RUNS = [
    ("dbbench", "dev", "The answer is 12"),
    ("webshop", "fixed", "Thought: buy. Action: nothing"),
]


def main() -> None:
    root = Settings().data_root()
    with Path(sys.argv[1]).open("w", encoding="utf-8") as out:
        for env, split, junk in RUNS:
            suite = get_suite(env)
            tasks = spread(suite.load_tasks(root, split), 4)
            runtime = HarnessRuntime(suite, ScriptedPolicy([junk]), root, RunConfig(max_steps=3))
            specs = [
                EpisodeSpec(task=t, seed=i, hooks=NoHooks(), trajectory_id=f"g-{env}-{i}")
                for i, t in enumerate(tasks)
            ]
            for trajectory in runtime.run(specs):
                out.write(trajectory.model_dump_json() + "\n")
            runtime.close()


if __name__ == "__main__":
    main()
