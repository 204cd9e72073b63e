"""How fast the embedded frozen target decides, per configuration, in one run (issue 16).

For each configuration (number format x decode engine, all with the prefix cache):
decisions/s over real episodes (ALFWorld with the canary's history window, DBBench), then the
raw model's prefill tokens/s (one 2,000-token prompt, last-position logits only) and decode
tokens/s at ~2,000 cached tokens for 1 row and for 8 rows decoded together, next to the
memory-bandwidth bound of a decode step (bytes of weights and cache read per step against the
bandwidth measured here). The first configuration is the old default (fp32, prefix cache, rows
answered one at a time); ratios are against it, measured in the same process, one
configuration after the other.

    .venv/bin/python benchmarks/target_speed.py            # 8 episodes x 10 steps per env
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.envs.alfworld import clear_translations
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig, spread
from harness_r1.models import BF16_FLAGS, SamplingConfig, TransformersPolicy, cpu_flags


@dataclass(frozen=True)
class Config:
    name: str
    dtype: str
    batched_decode: bool
    draft_tokens: int = 0
    keep_freed_heap: bool = True


# The old default runs first and without the kept heap: glibc's setting is process-wide and
# stays once a policy has made it, so every later configuration keeps freed blocks.
CONFIGS = (
    Config("old default: fp32, one row at a time", "float32", False, keep_freed_heap=False),
    Config("lever: freed heap kept (fp32, one row at a time)", "float32", False),
    Config("lever: bf16 alone", "bfloat16", False),
    Config("lever: int8 alone (not equivalent)", "int8", False),
    Config("lever: lockstep decode alone (fp32)", "float32", True),
    Config("int8 + lockstep decode", "int8", True),
    Config("bf16 + lockstep decode", "bfloat16", True),
    Config("lever: fp32 + lockstep + prompt-lookup drafts (4)", "float32", True, 4),
    Config("new default here: bf16 + lockstep + prompt-lookup drafts (4)", "bfloat16", True, 4),
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
    clear_translations()  # every configuration translates its ALFWorld games afresh
    tasks = spread(suite.load_tasks(root, split), args.episodes)
    config = RunConfig(
        max_steps=args.max_steps, lockstep=args.episodes, history_turns=args.history_turns
    )
    runtime = HarnessRuntime(suite, policy, root, config)
    specs = [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
    target_before = policy.generate_seconds
    with timed() as seconds:
        trajectories = runtime.run(specs)
    runtime.close()
    decisions = sum(t.outcome.steps for t in trajectories)
    target_s = policy.generate_seconds - target_before
    print(f"{env}: {decisions} decisions in {seconds[0]:.1f} s, {target_s:.1f} s in the target")
    return decisions / seconds[0]


def bandwidth_gb_s(rounds: int = 3) -> float:
    """Read bandwidth as torch sees it: the best of `rounds` sums over a 1 GiB tensor."""
    import torch

    big = torch.ones(256 * 1024 * 1024)
    best = float("inf")
    for _ in range(rounds):
        with timed() as seconds:
            big.sum()
        best = min(best, seconds[0])
    return big.numel() * 4 / best / 1e9


def weight_bytes(model: Any) -> int:
    """Bytes of weights a decode step reads: every linear layer's (the tied output layer
    included; int8 layers count one byte a weight), not the embedding table (one row)."""
    import torch

    total = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        weight = weight() if callable(weight) else weight
        if isinstance(weight, torch.Tensor) and not isinstance(module, torch.nn.Embedding):
            total += weight.numel() * weight.element_size()
    return total


def kv_bytes_per_token(model: Any) -> int:
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    element = 2 if next(model.parameters()).dtype == torch_dtype("bfloat16") else 4
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * element


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def raw_speeds(policy: TransformersPolicy, context: int, rounds: int) -> dict[str, float]:
    """Prefill tokens/s over `context` tokens; decode tokens/s at `context` cached tokens for
    1 and 8 rows, with the configuration's attention and cache (the lockstep engine's
    preallocated buffers, or a DynamicCache growing by concatenation)."""
    import torch
    from transformers import DynamicCache

    from harness_r1.models import left_pad_stack, row_cache

    model = policy.model
    ids = torch.randint(100, 40_000, (8, context))
    out: dict[str, float] = {}
    with torch.inference_mode():
        model(input_ids=ids[:1, :64], logits_to_keep=1)  # warm-up
        with timed() as prefill:
            for _ in range(rounds):
                cache = DynamicCache()
                model(input_ids=ids[:1], past_key_values=cache, use_cache=True, logits_to_keep=1)
        out["prefill"] = context * rounds / prefill[0]
        for rows in (1, 8):
            cache = DynamicCache()
            for start in range(0, context, 500):
                model(input_ids=ids[:rows, start : start + 500], past_key_values=cache)
            if policy.batched_decode and policy.prefix_cache is not None:
                # the lockstep engine's cache: rows stacked into buffers written in place
                singles = [row_cache(cache, r, slice(0, context)) for r in range(rows)]
                cache, _ = left_pad_stack(singles, room=rounds * 4 + 1)
            mask = torch.ones(rows, context + 1, dtype=torch.long)
            step = ids[:rows, -1:]
            model(input_ids=step, attention_mask=mask, past_key_values=cache)
            with timed() as decode:
                for i in range(rounds * 4):
                    mask = torch.ones(rows, context + 2 + i, dtype=torch.long)
                    model(input_ids=step, attention_mask=mask, past_key_values=cache)
            out[f"decode{rows}"] = rows * rounds * 4 / decode[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--history-turns", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--context", type=int, default=2000)
    parser.add_argument("--only", nargs="*", help="configuration names (prefixes) to run")
    args = parser.parse_args()
    native = sorted(cpu_flags() & set(BF16_FLAGS))
    bandwidth = bandwidth_gb_s()
    print(f"native bf16 flags on this CPU: {native or 'none'}; read bandwidth {bandwidth:.1f} GB/s")
    rows = []
    for config in CONFIGS:
        if args.only and not any(config.name.startswith(p) for p in args.only):
            continue
        policy = TransformersPolicy.embedded(
            sampling=SamplingConfig(max_new_tokens=64),
            dtype=config.dtype,
            prefix_cache=True,
            batched_decode=config.batched_decode,
            draft_tokens=config.draft_tokens,
            keep_freed_heap=config.keep_freed_heap,
            max_batch=args.episodes,
        )
        alf = decisions_per_s(policy, "alfworld", "valid_seen", args)
        db = decisions_per_s(policy, "dbbench", "dev", args)
        raw = raw_speeds(policy, args.context, args.rounds)
        step_bytes = weight_bytes(policy.model) + args.context * kv_bytes_per_token(policy.model)
        bound = bandwidth * 1e9 / step_bytes
        rows.append((config.name, alf, db, raw, bound))
        print(rows[-1], flush=True)
    base = rows[0]
    print(
        "\n| configuration | ALFWorld decisions/s | DBBench decisions/s | prefill tokens/s "
        "| decode tokens/s, 1 row | decode tokens/s, 8 rows | 1-row bandwidth bound |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, alf, db, raw, bound in rows:
        print(
            f"| {name} | {alf:.3f} (x{alf / base[1]:.2f}) | {db:.3f} (x{db / base[2]:.2f}) | "
            f"{raw['prefill']:.0f} (x{raw['prefill'] / base[3]['prefill']:.2f}) | "
            f"{raw['decode1']:.1f} | {raw['decode8']:.1f} "
            f"(x{raw['decode8'] / base[3]['decode1']:.2f}) | {bound:.0f} |"
        )
    print(f"\nraw speeds at {args.context} tokens of context")


if __name__ == "__main__":
    main()
