"""Decisions/s of the deployed agent beside the base model, side by side in one process.

The deployed agent is the base with its adapter merged into the weights (same shapes, same
number format, same engine), so a generated token should cost the same; what may differ is how
many tokens a decision takes (the agent answers with a bare action, the base thinks aloud).
Both are measured on the same first prompts of held-out tasks (the runtime's prompter, no
overlay), in alternating rounds, one batched call per round: decisions/s and generated
tokens/s per model, medians over the rounds, and the ratios agent / base.

    .venv/bin/python benchmarks/deployed_speed.py --rounds 3 --json runs/deployed-speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import spread
from harness_r1.harness.policies import PolicySpec, build_policy
from harness_r1.models import GenerationRequest, Policy

HELD_OUT = (("dbbench", "dev"), ("webshop", "fixed_heldout"), ("alfworld", "valid_seen"))


def first_prompts(data_root: Path, per_env: int) -> list[GenerationRequest]:
    requests = []
    for env_name, split in HELD_OUT:
        suite = get_suite(env_name)
        env = suite.make_env(data_root)
        try:
            for task in spread(suite.load_tasks(data_root, split), per_env):
                observation, info = env.reset(task, seed=0)
                messages = [
                    {"role": "system", "content": suite.prompter.system_prompt(task)},
                    {
                        "role": "user",
                        "content": suite.prompter.first_message(task, observation, info),
                    },
                ]
                requests.append(GenerationRequest(messages, seed=0))
        finally:
            env.close()
    return requests


def timed_round(policy: Policy, requests: list[GenerationRequest]) -> tuple[float, int]:
    started = time.perf_counter()
    generations = policy.generate(requests)
    return time.perf_counter() - started, sum(g.tokens for g in generations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-env", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings()
    requests = first_prompts(settings.data_root(), args.per_env)
    policies = {
        kind: build_policy(PolicySpec(kind=kind, max_batch=len(requests), cache_dir=settings.cache))
        for kind in ("smollm2", "smollm2-agent")
    }
    for policy in policies.values():  # warm-up: first-call allocations are not the model's
        timed_round(policy, requests[:2])
    rounds: dict[str, list[tuple[float, int]]] = {kind: [] for kind in policies}
    for _ in range(args.rounds):
        for kind, policy in policies.items():
            rounds[kind].append(timed_round(policy, requests))
    result = {}
    for kind, runs in rounds.items():
        result[kind] = {
            "decisions_per_s": statistics.median(len(requests) / s for s, _ in runs),
            "tokens_per_s": statistics.median(t / s for s, t in runs),
            "tokens_per_decision": statistics.median(t / len(requests) for _, t in runs),
            "rounds": [[round(s, 3), t] for s, t in runs],
        }
    base, agent = result["smollm2"], result["smollm2-agent"]
    ratios = {
        "decisions_per_s": agent["decisions_per_s"] / base["decisions_per_s"],
        "tokens_per_s": agent["tokens_per_s"] / base["tokens_per_s"],
    }
    print(f"{len(requests)} first prompts ({args.per_env} per env), {args.rounds} rounds")
    print("| target | decisions/s | generated tokens/s | tokens per decision |")
    print("| --- | ---: | ---: | ---: |")
    for kind, row in result.items():
        print(
            f"| {kind} | {row['decisions_per_s']:.3f} | {row['tokens_per_s']:.1f} | "
            f"{row['tokens_per_decision']:.1f} |"
        )
    print(
        f"agent / base: decisions/s x{ratios['decisions_per_s']:.2f}, "
        f"tokens/s x{ratios['tokens_per_s']:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"result": result, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
