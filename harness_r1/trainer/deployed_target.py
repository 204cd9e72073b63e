"""Train the deployed target: LoRA on the embedded base from expert demonstrations.

The rows come from `trainer.target_experts` (conversations the runtime built, a loss on each
assistant turn from `train_from` on). They are tokenised here with the base's own chat
template, the labels masking every token but the trained assistant turns' text and their
end-of-turn token, and handed to TRL's `SFTTrainer` already tokenised (it trains on the
labels as given). Run directories, resuming and published versions are the engineer's SFT's
(`trainer.runs`, `trainer.versions`); `export_adapter` then writes the shipped file
(`models.deployed`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.errors import TrainingError
from harness_r1.trainer.model_io import file_sha256, load_policy, model_fingerprint, resolve_base
from harness_r1.trainer.runs import (
    finish_run,
    make_meter,
    run_key,
    run_metadata,
    save_adapter,
    select_run_dir,
)
from harness_r1.trainer.sft import SftSettings, sft_config
from harness_r1.trainer.versions import TrainResult, publish_version

log = structlog.get_logger(__name__)

#: every linear layer of a Llama block: the deployed target learns a task, not a format only
ALL_LINEAR_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def deployed_settings(output_root: Path, **overrides: Any) -> SftSettings:
    """The deployed target's training settings (those the shipped adapter was trained with):
    the engineer's SFT settings with LoRA on every linear layer, bf16 autocast on CPU, 4 rows
    a step (one at a time), 50 steps (about one epoch of the demonstrations)."""
    base = SftSettings(
        output_root=output_root,
        max_steps=50,
        learning_rate=4e-4,
        batch_size=1,
        grad_accum=4,
        max_length=6144,
        lora_r=16,
        lora_alpha=32,
        lora_targets=ALL_LINEAR_TARGETS,
        cpu_bf16=True,
        save_steps=50,
    )
    return replace(base, **overrides)


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row.get("messages"), list) or not isinstance(row.get("train_from"), int):
            raise TrainingError(f"{path}:{number}: a row needs messages and train_from")
        rows.append(row)
    if not rows:
        raise TrainingError(f"{path}: no rows to train on")
    return rows


def tokenize_row(row: dict[str, Any], tokenizer: Any) -> dict[str, list[int]]:
    """input_ids and labels of one row: labels are -100 except on each trained assistant
    turn's content and the end-of-turn token after it (the model learns to stop there)."""
    messages = row["messages"]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans = []
    for index in range(row["train_from"], len(messages)):
        if messages[index]["role"] != "assistant":
            continue
        head = tokenizer.apply_chat_template(
            messages[:index], tokenize=False, add_generation_prompt=True
        )
        upto = tokenizer.apply_chat_template(messages[: index + 1], tokenize=False)
        if not text.startswith(upto) or not upto.startswith(head):
            raise TrainingError("the chat template does not render turns as prefixes")
        end = upto.rstrip("\n")  # the turn's text and its end-of-turn marker, not the newline
        spans.append((len(head), len(end)))
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    labels = [
        token if any(start <= lo and hi <= end for start, end in spans) else -100
        for token, (lo, hi) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)
    ]
    if all(label == -100 for label in labels):
        raise TrainingError("a row has no trained token")
    return {"input_ids": list(encoded["input_ids"]), "labels": labels}


def tokenize_rows(
    rows: Sequence[dict[str, Any]], tokenizer: Any, max_length: int
) -> list[dict[str, list[int]]]:
    out = [tokenize_row(row, tokenizer) for row in rows]
    longest = max(len(r["input_ids"]) for r in out)
    if longest > max_length:
        raise TrainingError(f"a row has {longest} tokens, over max_length={max_length}")
    return out


@dataclass(frozen=True)
class DeployedRun:
    result: TrainResult
    rows: int
    trained_tokens: int
    tokens: int


def train_deployed(
    rows_path: Path,
    settings: SftSettings,
    *,
    base: str = "smollm2",
    cache_dir: Path | None = None,
) -> DeployedRun:
    """LoRA-train `base` on the rows file; publishes `<output_root>/engineer/vNNNN/` (the
    runs layout every trainer shares) with the rows' digest and the training cost."""
    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTTrainer

    rows = read_rows(rows_path)
    rows_sha = file_sha256(rows_path)
    base_dir = resolve_base(base, cache_dir)
    key = run_key(
        {
            "kind": "deployed-target",
            "base": model_fingerprint(base_dir),
            "dataset": rows_sha,
            "settings": {k: str(v) for k, v in vars(settings).items() if k != "output_root"},
        }
    )
    run_dir, resume = select_run_dir(settings.output_root, "deployed", key, settings.max_steps)
    set_seed(settings.seed)
    model, tokenizer, peft_config = load_policy(base_dir, settings, None)
    tokenized = tokenize_rows(rows, tokenizer, settings.max_length)
    trained = sum(sum(label != -100 for label in r["labels"]) for r in tokenized)
    total = sum(len(r["input_ids"]) for r in tokenized)
    log.info("deployed target rows", rows=len(rows), tokens=total, trained_tokens=trained)
    meter = make_meter()
    trainer = SFTTrainer(
        model=model,
        args=sft_config(settings, run_dir),
        train_dataset=Dataset.from_list(tokenized),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[meter],
    )
    output = trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    metadata = run_metadata(
        kind="deployed-target",
        base_dir=base_dir,
        adapter=None,
        settings=settings,
        trainer=trainer,
        output=output,
        meter=meter,
        run_dir=run_dir,
        resumed_from=resume,
        extra={
            "dataset": {
                "path": str(rows_path),
                "sha256": rows_sha,
                "rows": len(rows),
                "tokens": total,
                "trained_tokens": trained,
            },
            "loss_curve": [
                [int(entry["step"]), round(float(entry["loss"]), 4)]
                for entry in trainer.state.log_history
                if "loss" in entry
            ],
        },
    )
    result = publish_version(settings.output_root, save_adapter(trainer), metadata)
    finish_run(run_dir, result)
    return DeployedRun(result, len(rows), trained, total)


def export_adapter(
    version_dir: Path, agent_file: Path, manifest_file: Path, manifest: dict[str, Any]
) -> str:
    """A published peft adapter as the shipped file (bf16 safetensors, tensors named after
    the base's modules, `lora_r`/`lora_alpha` in its metadata) and its manifest (the given
    fields plus the file's SHA-256). Returns that SHA-256."""
    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((version_dir / "adapter_config.json").read_text(encoding="utf-8"))
    weights = load_file(str(version_dir / "adapter_model.safetensors"))
    tensors = {}
    for key, tensor in weights.items():
        name = key.removeprefix("base_model.model.").removesuffix(".weight")
        tensors[name] = tensor.to(torch.bfloat16).contiguous()
    metadata = {"lora_r": str(config["r"]), "lora_alpha": str(config["lora_alpha"])}
    agent_file.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(agent_file), metadata=metadata)
    digest = file_sha256(agent_file)
    data = {
        **manifest,
        "adapter_sha256": digest,
        "lora": {
            "r": config["r"],
            "alpha": config["lora_alpha"],
            "targets": sorted(config["target_modules"]),
        },
    }
    manifest_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return digest
