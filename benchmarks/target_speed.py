"""How fast the embedded frozen target decides, per configuration, in one run (issue 16).

For each configuration (number format x prefix-cache reuse): decisions/s over real episodes
(ALFWorld with the canary's history window, DBBench), then prefill tokens/s and decode
tokens/s on one long ALFWorld prompt (a 1-token answer is the prefill; the rest of a 64-token
answer is the decode). The first configuration is the old default (fp32 with the prefix
cache); ratios are against it, measured in the same process, one configuration after the other.

    .venv/bin/python benchmarks/target_speed.py --episodes 4 --max-steps 5
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies.base import GenerationRequest, SamplingConfig
from harness_r1.harness.policies.cpu import BF16_FLAGS, cpu_flags
from harness_r1.harness.policies.transformers_backend import TransformersPolicy
from harness_r1.harness.tasks import spread


@dataclass(frozen=True)
class Config:
    name: str
    dtype: str
    prefix_cache: bool


CONFIGS = (
    Config("fp32 + prefix cache (old default)", "float32", True),
    Config("fp32, no prefix cache", "float32", False),
    Config("bf16 + prefix cache", "bfloat16", True),
    Config("bf16, no prefix cache", "bfloat16", False),
)


@contextmanager
def timed() -> Iterator[list[float]]:
    box: list[float] = []
    started = time.perf_counter()
    yield box
    box.append(time.perf_counter() - started)


def decisions_per_s(
    policy: TransformersPolicy, env: str, split: str, args: argparse.Namespace
) -> float:
    root = Settings().data_root()
    suite = get_suite(env)
    tasks = spread(suite.load_tasks(root, split), args.episodes)
    config = RunConfig(
        max_steps=args.max_steps, lockstep=args.episodes, history_turns=args.history_turns
    )
    runtime = HarnessRuntime(suite, policy, root, config)
    specs = [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
    with timed() as seconds:
        trajectories = runtime.run(specs)
    runtime.close()
    return sum(t.outcome.steps for t in trajectories) / seconds[0]


def long_prompt() -> list[dict[str, str]]:
    """An ALFWorld-like prompt of ~2,500 tokens: the instructions and a long history."""
    system = (
        "You are an agent in a household. Interact with the environment to solve the task. "
        "Answer with one command per turn: go to X, open X, take X from Y, put X in/on Y, "
        "heat X with Y, cool X with Y, clean X with Y, use X, examine X, look, inventory. "
    ) * 6
    messages = [{"role": "system", "content": system}]
    for step in range(14):
        messages.append(
            {"role": "user", "content": f"Step {step}: you are in the middle of a room. " * 8}
        )
        messages.append({"role": "assistant", "content": f"go to cabinet {step + 1}"})
    messages.append({"role": "user", "content": "What is your next command?"})
    return messages


def prefill_and_decode(dtype: str, rounds: int) -> tuple[float, float, int]:
    one = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=1), dtype=dtype)
    request = GenerationRequest(messages=long_prompt(), seed=0)
    one.generate([request])  # warm-up
    prompt_tokens = one.generate([request])[0].prompt_tokens or 0
    with timed() as prefill:
        for _ in range(rounds):
            one.generate([request])
    full = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=64), dtype=dtype)
    full.generate([request])
    with timed() as whole:
        answers = [full.generate([request])[0] for _ in range(rounds)]
    decoded = sum(a.tokens for a in answers) - rounds
    decode_s = whole[0] - prefill[0]
    return prompt_tokens * rounds / prefill[0], decoded / decode_s, prompt_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--history-turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="configuration names (prefixes) to run")
    args = parser.parse_args()
    native = sorted(cpu_flags() & set(BF16_FLAGS))
    print(f"native bf16 flags on this CPU: {native or 'none'}")
    rows = []
    for config in CONFIGS:
        if args.only and not any(config.name.startswith(p) for p in args.only):
            continue
        policy = TransformersPolicy.embedded(
            sampling=SamplingConfig(max_new_tokens=64),
            dtype=config.dtype,
            prefix_cache=config.prefix_cache,
            max_batch=args.episodes,
        )
        alf = decisions_per_s(policy, "alfworld", "valid_seen", args)
        db = decisions_per_s(policy, "dbbench", "dev", args)
        prefill, decode, prompt = prefill_and_decode(config.dtype, args.rounds)
        rows.append((config.name, alf, db, prefill, decode, prompt))
        print(rows[-1], flush=True)
    base = rows[0]
    print(
        "\n| configuration | ALFWorld decisions/s | DBBench decisions/s | prefill tokens/s "
        "| decode tokens/s |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, alf, db, prefill, decode, _prompt in rows:
        print(
            f"| {name} | {alf:.3f} (x{alf / base[1]:.2f}) | {db:.3f} (x{db / base[2]:.2f}) | "
            f"{prefill:.0f} (x{prefill / base[3]:.2f}) | {decode:.1f} (x{decode / base[4]:.2f}) |"
        )
    print(f"\nprefill measured on a {base[5]}-token prompt")


if __name__ == "__main__":
    main()
