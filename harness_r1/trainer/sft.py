"""Cold-start SFT of the engineer with TRL's `SFTTrainer`. What every training run shares lives
beside it: `trainer.runs` (resumable run directories, run keys, metadata), `trainer.versions`
(published adapters) and `trainer.model_io` (the base model, LoRA, loading the policy).

SFT: the cold-start dataset (`trainer.coldstart`, JSONL rows in TRL's conversational
prompt/completion format, `{"prompt": [messages], "completion": [{"role": "assistant", ...}],
"metadata": {...}}`) trains a LoRA adapter (peft) on the completion tokens only
(`completion_only_loss=True`). On CPU: `use_cpu=True, bf16=False, gradient_checkpointing=False`.
TRL's own progress bar and per-step logs show progress.

Layout under `settings.output_root` (the same for GRPO):
- `runs/<kind>-<key>[-<attempt>]/checkpoint-N/`: the Trainer's checkpoints. `key` hashes what
  defines the run (base model, parent adapter, data, settings other than the step budget), so
  running the same command again after an interruption finds the run and resumes from its last
  checkpoint (`resume_from_checkpoint`). Asking for more steps than a finished run did extends
  it from its last checkpoint; asking for no more starts a new attempt (a finished run is never
  trained twice).
- `engineer/vNNNN/`: the published adapter of one finished run (peft `adapter_config.json` +
  weights, `metadata.json`; the tokenizer is the base model's). The next free number is taken
  atomically (the version is written under a temporary name and renamed); a version is never
  overwritten.

torch, transformers, trl, peft and datasets are imported inside functions (the `train` extra:
`pip install 'harness-r1[train]'`), never at module import.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.errors import TrainingError
from harness_r1.trainer.model_io import (
    LLAMA_LORA_TARGETS,
    file_sha256,
    load_policy,
    model_fingerprint,
    require_training_stack,
    resolve_base,
)
from harness_r1.trainer.runs import (
    adapter_identity,
    check_common,
    finish_run,
    identity_settings,
    make_meter,
    run_key,
    run_metadata,
    save_adapter,
    select_run_dir,
    use_bf16,
)
from harness_r1.trainer.versions import TrainResult, publish_version

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SftSettings:
    """Cold-start SFT settings.

    output_root: where `runs/` and `engineer/vNNNN/` go.
    epochs: passes over the dataset, used when `max_steps <= 0`.
    max_steps: optimizer steps; > 0 overrides `epochs`.
    learning_rate: AdamW learning rate of the LoRA weights (linear decay).
    batch_size / grad_accum: rows per step = batch_size * grad_accum.
    max_length: prompt + completion tokens per row; a longer row is refused before training
        (TRL would cut it at the end, i.e. drop the patch the row is there to teach).
    lora_r / lora_alpha / lora_dropout / lora_targets: the adapter (peft LoraConfig).
    seed: adapter initialisation and data order.
    save_steps / save_total_limit: checkpoint cadence and how many are kept (resume points;
        None keeps every one: each `checkpoint-N/` holds a loadable adapter, for a curve of
        the engineer over training); the last step is always saved.
    logging_steps: how often the loss is logged.
    use_cpu: train on CPU (fp32 unless `cpu_bf16`, no gradient checkpointing); False uses the
        accelerator with bf16 where it supports it.
    cpu_bf16: on CPU, bf16 autocast with fp32 master weights (`trainer.runs.use_bf16`).
    threads: torch intra-op threads (None: torch's default).
    """

    output_root: Path = Path("artifacts")
    epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 2e-4
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 4096
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_targets: tuple[str, ...] = LLAMA_LORA_TARGETS
    seed: int = 0
    save_steps: int = 50
    save_total_limit: int | None = 2
    logging_steps: int = 1
    use_cpu: bool = True
    threads: int | None = None
    cpu_bf16: bool = False

    def __post_init__(self) -> None:
        if self.max_steps <= 0 and self.epochs <= 0:
            raise ValueError("set max_steps > 0 or epochs > 0")
        check_common(self)
        if self.max_length < 16:
            raise ValueError(f"max_length must be >= 16, got {self.max_length}")


# -- versions -------------------------------------------------------------------------------


# -- base model, hashes, versions of the libraries ------------------------------------------


# -- run directories and resuming -----------------------------------------------------------


# -- the dataset ----------------------------------------------------------------------------


def _messages(value: Any, where: str, what: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise TrainingError(f"{where}: {what} must be a non-empty list of messages")
    out = []
    for message in value:
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or not isinstance(message.get("content"), str)
        ):
            raise TrainingError(f"{where}: each {what} message needs string role and content")
        out.append({"role": message["role"], "content": message["content"]})
    return out


def load_sft_rows(path: Path) -> list[dict[str, Any]]:
    """The cold-start rows, each reduced to `prompt` (messages) and `completion` (one assistant
    message); other columns (provenance) are left out of training. A malformed row is an error
    naming its line."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise TrainingError(f"{where}: not JSON ({err})") from None
            if not isinstance(row, dict):
                raise TrainingError(f"{where}: a row must be a JSON object")
            prompt = _messages(row.get("prompt"), where, "prompt")
            completion = _messages(row.get("completion"), where, "completion")
            if len(completion) != 1 or completion[0]["role"] != "assistant":
                raise TrainingError(f"{where}: completion must be one assistant message")
            rows.append({"prompt": prompt, "completion": completion})
    if not rows:
        raise TrainingError(f"{path}: no rows to train on")
    return rows


# -- SFT ------------------------------------------------------------------------------------


def check_row_lengths(rows: Sequence[dict[str, Any]], tokenizer: Any, max_length: int) -> int:
    """The longest row in tokens (chat template applied); TrainingError when any row is longer
    than `max_length`, since truncation would silently remove the end of its completion."""
    lengths = []
    for row in rows:
        text = tokenizer.apply_chat_template([*row["prompt"], *row["completion"]], tokenize=False)
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    too_long = [i for i, n in enumerate(lengths) if n > max_length]
    if too_long:
        raise TrainingError(
            f"{len(too_long)} of {len(rows)} rows are longer than max_length={max_length} "
            f"tokens (longest {max(lengths)}, first at row {too_long[0] + 1}); truncation would "
            "cut their completions: raise --max-length or shorten the packets"
        )
    return max(lengths, default=0)


def sft_config(settings: SftSettings, run_dir: Path) -> Any:
    from trl import SFTConfig

    bf16 = use_bf16(settings.use_cpu, settings.cpu_bf16)
    return SFTConfig(
        output_dir=str(run_dir),
        num_train_epochs=settings.epochs if settings.epochs > 0 else 1.0,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        learning_rate=settings.learning_rate,
        max_length=settings.max_length,
        completion_only_loss=True,
        assistant_only_loss=False,
        packing=False,
        use_cpu=settings.use_cpu,
        bf16=bf16,
        fp16=False,
        gradient_checkpointing=False,
        logging_steps=settings.logging_steps,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.save_total_limit,
        seed=settings.seed,
        data_seed=settings.seed,
        report_to="none",
        disable_tqdm=False,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
    )


def train_sft(
    dataset_path: Path,
    base: str | Path = "smollm2",
    settings: SftSettings | None = None,
    *,
    adapter: Path | None = None,
    cache_dir: Path | None = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train (or resume) a LoRA adapter on the cold-start dataset; publish it as the next
    `engineer/vNNNN/`. `adapter` continues from an existing adapter (its version becomes the
    parent) instead of a fresh LoRA."""
    settings = settings or SftSettings()
    require_training_stack()
    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTTrainer

    dataset_path = Path(dataset_path)
    rows = load_sft_rows(dataset_path)
    dataset_sha = file_sha256(dataset_path)
    base_dir = resolve_base(base, cache_dir)
    key = run_key(
        {
            "kind": "sft",
            "base": model_fingerprint(base_dir),
            "adapter": adapter_identity(adapter),
            "dataset": dataset_sha,
            "settings": identity_settings(settings),
        }
    )
    run_dir, resume = select_run_dir(settings.output_root, "sft", key, settings.max_steps)
    log.info(
        "sft run",
        run_dir=str(run_dir),
        resume_from=None if resume is None else resume.name,
        rows=len(rows),
    )
    set_seed(settings.seed)
    model, tokenizer, peft_config = load_policy(base_dir, settings, adapter)
    longest = check_row_lengths(rows, tokenizer, settings.max_length)
    log.info("sft rows fit", longest_tokens=longest, max_length=settings.max_length)
    meter = make_meter()
    trainer = SFTTrainer(
        model=model,
        args=sft_config(settings, run_dir),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[meter, *callbacks],
    )
    output = trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    metadata = run_metadata(
        kind="sft",
        base_dir=base_dir,
        adapter=adapter,
        settings=settings,
        trainer=trainer,
        output=output,
        meter=meter,
        run_dir=run_dir,
        resumed_from=resume,
        extra={
            "dataset": {"path": str(dataset_path), "sha256": dataset_sha, "rows": len(rows)},
        },
    )
    result = publish_version(settings.output_root, save_adapter(trainer), metadata)
    finish_run(run_dir, result)
    return result


__all__ = ["SftSettings", "check_row_lengths", "load_sft_rows", "sft_config", "train_sft"]
