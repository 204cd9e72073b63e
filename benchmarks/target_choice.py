"""Which embedded base the deployed agent is trained from: SmolLM2-135M-Instruct or Gemma 3
270M, measured on the same demonstration rows before any training.

For each base: the loss on the rows' trained tokens (how far the untrained model is from the
expert: lower needs less training), and the seconds of one training step (forward and
backward, bf16 autocast where the CPU has it, LoRA on every linear layer as the deployed
target trains) per 1,000 tokens, medians over the rows, the two bases alternating row by row.

    .venv/bin/python benchmarks/target_choice.py artifacts/deployed/expert-rows.jsonl --rows 12
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from harness_r1.models import EMBEDDED, converted_checkpoint
from harness_r1.trainer import deployed_settings, load_policy, read_rows, tokenize_row, use_bf16


def load(base: str) -> tuple[Any, Any]:
    from peft import get_peft_model

    settings = deployed_settings(Path("/tmp"))
    model, tokenizer, config = load_policy(converted_checkpoint(EMBEDDED[base]), settings)
    return get_peft_model(model, config), tokenizer


def step(model: Any, tokens: dict[str, list[int]], bf16: bool) -> tuple[float, float]:
    """(loss, seconds) of one forward and backward pass on one row."""
    ids = torch.tensor([tokens["input_ids"]])
    labels = torch.tensor([tokens["labels"]])
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    model.zero_grad()
    return float(loss), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rows", type=Path)
    parser.add_argument("--rows", dest="count", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = read_rows(args.rows)
    picked = [rows[(i * len(rows)) // args.count] for i in range(args.count)]
    bf16 = use_bf16(True, True)
    models = {base: load(base) for base in ("smollm2", "gemma3")}
    tokenized = {
        base: [tokenize_row(row, tokenizer) for row in picked]
        for base, (_, tokenizer) in models.items()
    }
    measured: dict[str, list[tuple[float, float, int]]] = {base: [] for base in models}
    for index in range(len(picked)):
        for base, (model, _) in models.items():
            tokens = tokenized[base][index]
            loss, seconds = step(model, tokens, bf16)
            measured[base].append((loss, seconds, len(tokens["input_ids"])))
    result = {}
    print(f"{len(picked)} rows, bf16 autocast: {bf16}")
    print("| base | loss on the expert's tokens (median) | s per 1k tokens, fwd+bwd (median) |")
    print("| --- | ---: | ---: |")
    for base, runs in measured.items():
        loss = statistics.median(r[0] for r in runs)
        per_k = statistics.median(r[1] / r[2] * 1000 for r in runs)
        result[base] = {"loss": loss, "s_per_1k_tokens": per_k, "rows": runs}
        print(f"| {EMBEDDED[base].name} | {loss:.3f} | {per_k:.2f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
