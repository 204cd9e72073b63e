"""Episodes/s and generated tokens/s of the transformers backend: 8 episodes in lockstep
(one batched generate per decision round) vs the same 8 episodes one by one, and (with
--prefix-cache) the same 8 in lockstep answered one request at a time reusing the KV cache of
each prompt's longest seen prefix; all in one run, one model load.

    .venv/bin/python benchmarks/policy_batching.py --env alfworld --split valid_seen \
        --episodes 8 --max-steps 5
"""

from __future__ import annotations

import argparse
import time

from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig, spread
from harness_r1.models import (
    PrefixCacheStore,
    SamplingConfig,
    TransformersPolicy,
    copy_kv_prefix,
    crop_kv_cache,
)


def measure(
    policy: TransformersPolicy,
    env: str,
    split: str,
    episodes: int,
    max_steps: int,
    lockstep: int,
    history_turns: int = 6,
) -> dict[str, float]:
    root = Settings().data_root()
    suite = get_suite(env)
    tasks = spread(suite.load_tasks(root, split), episodes)
    config = RunConfig(max_steps=max_steps, lockstep=lockstep, history_turns=history_turns)
    runtime = HarnessRuntime(suite, policy, root, config)
    specs = [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
    tokens_before = policy.generated_tokens
    started = time.perf_counter()
    trajectories = runtime.run(specs)
    seconds = time.perf_counter() - started
    runtime.close()
    tokens = policy.generated_tokens - tokens_before
    steps = sum(t.outcome.steps for t in trajectories)
    return {
        "seconds": seconds,
        "episodes_per_s": len(trajectories) / seconds,
        "steps": steps,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="alfworld")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--history-turns", type=int, default=6)
    parser.add_argument("--prefix-cache", action="store_true", help="Also measure prefix reuse.")
    args = parser.parse_args()
    # the prefix-cache row measures the engine before issue 16 (rows answered one at a time);
    # benchmarks/target_speed.py measures the lockstep engine against it
    policy = TransformersPolicy.embedded(
        sampling=SamplingConfig(max_new_tokens=args.max_new_tokens),
        max_batch=args.episodes,
        batched_decode=False,
    )
    common = (args.env, args.split, args.episodes, args.max_steps)
    one = measure(policy, *common, lockstep=1, history_turns=args.history_turns)
    batched = measure(policy, *common, lockstep=args.episodes, history_turns=args.history_turns)
    rows = [("one by one", one), (f"lockstep {args.episodes}", batched)]
    if args.prefix_cache:
        policy.prefix_cache = PrefixCacheStore(
            2 * args.episodes, crop=crop_kv_cache, copy_prefix=copy_kv_prefix
        )
        cached = measure(policy, *common, lockstep=args.episodes, history_turns=args.history_turns)
        rows.append((f"lockstep {args.episodes}, prefix cache", cached))
    print("| mode | episodes | steps | seconds | episodes/s | gen tokens | tokens/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows:
        print(
            f"| {name} | {args.episodes} | {r['steps']} | {r['seconds']:.1f} "
            f"| {r['episodes_per_s']:.3f} | {r['tokens']} | {r['tokens_per_s']:.1f} |"
        )
    episodes_ratio = batched["episodes_per_s"] / one["episodes_per_s"]
    tokens_ratio = batched["tokens_per_s"] / one["tokens_per_s"]
    print(f"\nlockstep / one-by-one: episodes/s x{episodes_ratio:.2f}", end="")
    print(f", tokens/s x{tokens_ratio:.2f}")
    if args.prefix_cache and policy.prefix_cache is not None:
        vs_one = cached["episodes_per_s"] / one["episodes_per_s"]
        vs_lockstep = cached["episodes_per_s"] / batched["episodes_per_s"]
        reused = policy.prefix_cache.stats.reuse_ratio
        print(f"prefix cache / one-by-one: episodes/s x{vs_one:.2f}", end="")
        print(f"; prefix cache / lockstep: x{vs_lockstep:.2f}; prompt tokens reused {reused:.1%}")


if __name__ == "__main__":
    main()
