"""Cold-start SFT of the engineer with TRL's `SFTTrainer`, and what every training run shares:
versioned adapters, resumable run directories and their metadata.

SFT: the cold-start dataset (`trainer.coldstart`, JSONL rows in TRL's conversational
prompt/completion format, `{"prompt": [messages], "completion": [{"role": "assistant", ...}],
"metadata": {...}}`) trains a LoRA adapter (peft) on the completion tokens only
(`completion_only_loss=True`). On CPU: `use_cpu=True, bf16=False, gradient_checkpointing=False`.
TRL's own progress bar and per-step logs show progress.

Layout under `settings.output_root`:
- `runs/<kind>-<key>[-<attempt>]/checkpoint-N/`: the Trainer's checkpoints. `key` hashes what
  defines the run (base model, parent adapter, data, settings other than the step budget), so
  running the same command again after an interruption finds the run and resumes from its last
  checkpoint (`resume_from_checkpoint`). Asking for more steps than a finished run did extends
  it from its last checkpoint; asking for no more starts a new attempt (a finished run is never
  trained twice).
- `engineer/vNNNN/`: the published adapter of one finished run (peft `adapter_config.json` +
  weights, the tokenizer, `metadata.json`). The next free number is taken atomically (the
  version is written under a temporary name and renamed); a version is never overwritten.

torch, transformers, trl, peft and datasets are imported inside functions (the `train` extra:
`pip install 'harness-r1[train]'`), never at module import.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

ENGINEER_DIR = "engineer"
RUNS_DIR = "runs"
METADATA_FILE = "metadata.json"
#: The attention projections of a Llama-architecture model (SmolLM2 is one).
LLAMA_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
TRAIN_HINT = "pip install 'harness-r1[train]' (trl==1.16.0, peft>=0.17,<1)"
VERSION_RE = re.compile(r"^v(\d{4,})$")
#: Settings that do not define a run (a resumed run may change them).
NON_IDENTITY_SETTINGS = frozenset(
    {
        "output_root",
        "max_steps",
        "epochs",
        "logging_steps",
        "save_steps",
        "save_total_limit",
        "threads",
    }
)


class TrainingError(RuntimeError):
    """Training could not start or its inputs are unusable (with what to do about it)."""


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
    save_steps / save_total_limit: checkpoint cadence and how many are kept (resume points);
        the last step is always saved.
    logging_steps: how often the loss is logged.
    use_cpu: train on CPU (fp32, no gradient checkpointing); False uses the accelerator with
        bf16 where it supports it.
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
    save_total_limit: int = 2
    logging_steps: int = 1
    use_cpu: bool = True
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.max_steps <= 0 and self.epochs <= 0:
            raise ValueError("set max_steps > 0 or epochs > 0")
        check_common(self)
        if self.max_length < 16:
            raise ValueError(f"max_length must be >= 16, got {self.max_length}")


def check_common(settings: Any) -> None:
    if settings.learning_rate <= 0:
        raise ValueError(f"learning_rate must be > 0, got {settings.learning_rate}")
    if settings.lora_r < 1 or settings.lora_alpha < 1:
        raise ValueError("lora_r and lora_alpha must be >= 1")
    if not settings.lora_targets:
        raise ValueError("lora_targets must name at least one module")
    if settings.save_steps < 1 or settings.logging_steps < 1:
        raise ValueError("save_steps and logging_steps must be >= 1")
    if getattr(settings, "grad_accum", 1) < 1 or getattr(settings, "batch_size", 1) < 1:
        raise ValueError("batch_size and grad_accum must be >= 1")


def settings_dict(settings: Any) -> dict[str, Any]:
    """The settings as JSON-able values (paths and tuples as strings and lists)."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


@dataclass(frozen=True)
class TrainResult:
    """A published version: its directory, name (`v0001`) and metadata (as written)."""

    version_dir: Path
    version: str
    metadata: dict[str, Any] = field(default_factory=dict)


# -- versions -------------------------------------------------------------------------------


def versions_dir(root: Path) -> Path:
    return Path(root) / ENGINEER_DIR


def version_number(path: Path) -> int | None:
    match = VERSION_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_versions(root: Path) -> list[Path]:
    """Published versions under `root/engineer/`, oldest first."""
    directory = versions_dir(root)
    if not directory.is_dir():
        return []
    found = [(version_number(p), p) for p in directory.iterdir() if p.is_dir()]
    return [p for n, p in sorted((n, p) for n, p in found if n is not None)]


def latest_version(root: Path) -> Path | None:
    versions = list_versions(root)
    return versions[-1] if versions else None


def read_metadata(version_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(version_dir) / METADATA_FILE).read_text())
    return data


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def publish_version(
    root: Path, write: Callable[[Path], None], metadata: Mapping[str, Any]
) -> TrainResult:
    """Write a new version: `write(tmp_dir)` saves the adapter, then `metadata.json` (with the
    version name) goes next to it and the directory is renamed to the next free `vNNNN`. A
    rename onto a version that appeared meanwhile fails (versions are never empty), and the
    next number is tried: concurrent publishers never overwrite each other."""
    directory = versions_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        latest = latest_version(root)
        number = (version_number(latest) or 0) + 1 if latest is not None else 1
        for _ in range(1000):
            name = f"v{number:04d}"
            data = {**metadata, "version": name}
            _write_json(tmp / METADATA_FILE, data)
            target = directory / name
            if not target.exists():
                try:
                    os.rename(tmp, target)
                except OSError:  # another publisher took it between the check and the rename
                    pass
                else:
                    log.info("engineer version published", version=name, path=str(target))
                    return TrainResult(version_dir=target, version=name, metadata=data)
            number += 1
        raise TrainingError(f"could not allocate a version under {directory}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parent_version(adapter: Path | None) -> str | None:
    """The version an adapter was published as (`v0001`), its path if it is not a version,
    None when training starts from the base model."""
    if adapter is None:
        return None
    return Path(adapter).name if version_number(Path(adapter)) is not None else str(adapter)


# -- base model, hashes, versions of the libraries ------------------------------------------


def resolve_base(base: str | Path, cache_dir: Path | None = None) -> Path:
    """A transformers checkpoint directory: `base` itself, or an embedded model's converted
    checkpoint when `base` names one (`smollm2`: converted once from the packaged GGUF; a
    GGUF-loaded model is flagged quantized and cannot be trained)."""
    from harness_r1.harness.policies.local_models import EMBEDDED, converted_checkpoint

    if isinstance(base, str) and base in EMBEDDED:
        return converted_checkpoint(EMBEDDED[base], cache_dir)
    path = Path(base)
    if not (path / "config.json").is_file():
        raise TrainingError(
            f"{base} is neither an embedded model ({', '.join(EMBEDDED)}) nor a transformers "
            "checkpoint directory (no config.json)"
        )
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _safetensors_header(path: Path) -> bytes:
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        return handle.read(min(size, 1 << 24))


def model_fingerprint(path: Path) -> str:
    """Identifies a checkpoint without hashing its weights: config.json plus, per weight file,
    its name, size and safetensors header (tensor names, shapes, dtypes, offsets)."""
    path = Path(path)
    digest = hashlib.sha256()
    for name in ("config.json", "adapter_config.json"):
        if (path / name).is_file():
            digest.update(name.encode() + b"\0" + (path / name).read_bytes())
    for weights in sorted(path.glob("*.safetensors")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
        digest.update(_safetensors_header(weights))
    for weights in sorted(path.glob("*.bin")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for name in ("trl", "peft", "torch", "transformers", "accelerate", "datasets"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def require_training_stack() -> None:
    """Fail with the install hint when the train extra is missing."""
    missing = []
    for module in ("trl", "peft", "datasets"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise TrainingError(f"training needs {', '.join(missing)}: {TRAIN_HINT}")


def lora_config(settings: Any) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=list(settings.lora_targets),
        bias="none",
        task_type="CAUSAL_LM",
    )


def _align_eos(tokenizer: Any, model: Any) -> None:
    """Checkpoints converted before the fix (or other bases) may still disagree: align here
    too, so the Trainer never makes `<|im_start|>` the model's only eos."""
    from harness_r1.harness.policies.local_models import align_turn_tokens

    align_turn_tokens(tokenizer, model)


def load_policy(base_dir: Path, settings: Any, adapter: Path | None = None) -> tuple[Any, Any, Any]:
    """(model, tokenizer, peft_config): the base model in fp32 with a fresh LoRA config, or with
    an existing adapter loaded trainable (then peft_config is None: the adapter is the model's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if settings.threads:
        torch.set_num_threads(settings.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    if tokenizer.pad_token is None:
        # A dedicated pad token when the vocabulary has one (SmolLM2: <|endoftext|>), so padding
        # never reuses a token that also appears inside the sequences.
        vocab = tokenizer.get_vocab()
        tokenizer.pad_token = "<|endoftext|>" if "<|endoftext|>" in vocab else tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    _align_eos(tokenizer, model)
    if getattr(model, "hf_quantizer", None) is not None or getattr(
        model.config, "quantization_config", None
    ):
        raise TrainingError(
            f"{base_dir} is a quantized model (a GGUF load?), which cannot be trained: use the "
            "converted checkpoint (`resolve_base('smollm2')`)"
        )
    if adapter is None:
        return model, tokenizer, lora_config(settings)
    from peft import PeftModel

    if not (Path(adapter) / "adapter_config.json").is_file():
        raise TrainingError(f"{adapter} is not a peft adapter directory (no adapter_config.json)")
    return PeftModel.from_pretrained(model, str(adapter), is_trainable=True), tokenizer, None


# -- run directories and resuming -----------------------------------------------------------


def run_key(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def identity_settings(settings: Any) -> dict[str, Any]:
    return {k: v for k, v in settings_dict(settings).items() if k not in NON_IDENTITY_SETTINGS}


def _checkpoint_step(checkpoint: Path) -> int:
    state = Path(checkpoint) / "trainer_state.json"
    if state.is_file():
        return int(json.loads(state.read_text()).get("global_step", 0))
    return int(str(checkpoint).rsplit("-", 1)[-1])


def select_run_dir(root: Path, kind: str, key: str, max_steps: int) -> tuple[Path, Path | None]:
    """(run dir, checkpoint to resume from or None). Attempts of a run are tried in order; the
    first one that is not finished is used: resumed from its last checkpoint when it has one.
    Finished: its last checkpoint reached `max_steps` (> 0), or it wrote `completed.json`
    (epoch-based runs)."""
    from transformers.trainer_utils import get_last_checkpoint

    runs = Path(root) / RUNS_DIR
    attempt = 1
    while True:
        name = f"{kind}-{key}" if attempt == 1 else f"{kind}-{key}-{attempt}"
        run_dir = runs / name
        if not run_dir.is_dir():
            return run_dir, None
        last = get_last_checkpoint(str(run_dir))
        if last is None:
            return run_dir, None
        step = _checkpoint_step(Path(last))
        finished = step >= max_steps if max_steps > 0 else (run_dir / "completed.json").is_file()
        if not finished:
            return run_dir, Path(last)
        attempt += 1


def make_meter() -> Any:
    """A TrainerCallback measuring this invocation: wall time, steps and tokens since the
    (possibly resumed) start."""
    from transformers import TrainerCallback

    class Meter(TrainerCallback):
        def __init__(self) -> None:
            self.start_step = 0
            self.start_tokens = 0
            self.started = 0.0
            self.wall_s = 0.0
            self.steps = 0
            self.tokens = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.start_step = int(state.global_step)
            self.start_tokens = int(state.num_input_tokens_seen or 0)
            self.started = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.wall_s = time.perf_counter() - self.started
            self.steps = int(state.global_step) - self.start_step
            self.tokens = int(state.num_input_tokens_seen or 0) - self.start_tokens

    return Meter()


def last_logged(log_history: Iterable[Mapping[str, Any]], key: str) -> float | None:
    values = [row[key] for row in log_history if key in row]
    return float(values[-1]) if values else None


def _run_loss(log_history: Iterable[Mapping[str, Any]], start_step: int, fallback: float) -> float:
    """Mean logged loss of this invocation's steps (the Trainer's own `training_loss` divides by
    every step of a resumed run, including those done before)."""
    losses = [
        float(row["loss"])
        for row in log_history
        if "loss" in row and row.get("step", 0) > start_step
    ]
    return sum(losses) / len(losses) if losses else float(fallback)


def run_metadata(
    *,
    kind: str,
    base_dir: Path,
    adapter: Path | None,
    settings: Any,
    trainer: Any,
    output: Any,
    meter: Any,
    run_dir: Path,
    resumed_from: Path | None,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """What every version's metadata.json carries (plus the kind-specific `extra`)."""
    state = trainer.state
    wall = meter.wall_s or float(output.metrics.get("train_runtime", 0.0))
    return {
        "kind": kind,
        "created_at": datetime.now(UTC).isoformat(),
        "base_model": {
            "path": str(base_dir),
            "name": base_dir.name,
            "fingerprint": model_fingerprint(base_dir),
        },
        "parent_version": parent_version(adapter),
        "parent_path": None if adapter is None else str(adapter),
        "settings": settings_dict(settings),
        "train_loss": _run_loss(state.log_history, meter.start_step, output.training_loss),
        "final_loss": last_logged(state.log_history, "loss"),
        "last_log": next((dict(row) for row in reversed(state.log_history) if "loss" in row), None),
        "steps": int(state.global_step),
        "steps_this_run": meter.steps,
        "wall_s": round(wall, 3),
        "tokens": meter.tokens,
        "tokens_per_s": round(meter.tokens / wall, 2) if wall > 0 else None,
        "run_dir": str(run_dir),
        "resumed_from": None if resumed_from is None else resumed_from.name,
        "libraries": library_versions(),
        **extra,
    }


def save_adapter(trainer: Any, tokenizer: Any) -> Callable[[Path], None]:
    def write(directory: Path) -> None:
        trainer.model.save_pretrained(str(directory))
        tokenizer.save_pretrained(str(directory))

    return write


def finish_run(run_dir: Path, result: TrainResult) -> None:
    _write_json(
        run_dir / "completed.json",
        {"version": result.version, "steps": result.metadata.get("steps")},
    )


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

    bf16 = False
    if not settings.use_cpu:
        import torch

        bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
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
            "adapter": None if adapter is None else model_fingerprint(Path(adapter)),
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
    result = publish_version(settings.output_root, save_adapter(trainer, tokenizer), metadata)
    finish_run(run_dir, result)
    return result


def settings_from(cls: type[Any], values: Mapping[str, Any]) -> Any:
    """Settings from plain values (a CLI, a config file): unknown keys are an error, paths and
    tuples are converted."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields: {', '.join(unknown)}")
    converted = dict(values)
    if "output_root" in converted:
        converted["output_root"] = Path(converted["output_root"])
    for name, value in list(converted.items()):
        if isinstance(value, list):
            converted[name] = tuple(value)
    return cls(**converted)


__all__ = [
    "LLAMA_LORA_TARGETS",
    "SftSettings",
    "TrainResult",
    "TrainingError",
    "latest_version",
    "list_versions",
    "load_sft_rows",
    "publish_version",
    "read_metadata",
    "resolve_base",
    "settings_from",
    "train_sft",
]
