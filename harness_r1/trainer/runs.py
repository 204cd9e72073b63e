"""What every training run (SFT, GRPO) shares: the run key that makes a command resumable,
resumable run directories, the progress meter, run metadata and the finished result."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.errors import TrainingError
from harness_r1.trainer.model_io import file_sha256, library_versions, model_fingerprint
from harness_r1.trainer.versions import TrainResult, parent_version, write_json

log = structlog.get_logger(__name__)


RUNS_DIR = "runs"


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
        "stop_after_s",
        "cpu_bf16",  # how the steps are computed, not what is trained: a run may switch
    }
)


def use_bf16(use_cpu: bool, cpu_bf16: bool, flags: frozenset[str] | None = None) -> bool:
    """Mixed precision (bf16 autocast, fp32 master weights) for a run: on an accelerator where
    it supports bf16; on CPU only when asked (`cpu_bf16`: fast where the CPU has bf16
    instructions, AVX512-BF16 or AMX; see BENCHMARKS.md "Training in bf16 on CPU") and only
    where the CPU has them (`flags`: its flags, read from /proc/cpuinfo when None). Elsewhere
    torch emulates bf16: a matrix product took ~60x fp32's on an EPYC without AVX512
    (benchmarks/bf16_matmul.py), so the run says so and computes in fp32. The precision is how
    the steps are computed, not what is trained (NON_IDENTITY_SETTINGS): a run paused on one
    host resumes on another."""
    if use_cpu:
        if not cpu_bf16:
            return False
        from harness_r1.models import choose_dtype

        choice = choose_dtype("auto", flags)
        if choice.dtype != "bfloat16":
            log.warning("cpu_bf16 ignored: training in fp32", reason=choice.reason)
            return False
        return True
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


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


def run_key(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def identity_settings(settings: Any) -> dict[str, Any]:
    return {k: v for k, v in settings_dict(settings).items() if k not in NON_IDENTITY_SETTINGS}


def adapter_identity(adapter: Path | None) -> str | None:
    """A starting adapter's part of a run key: its fingerprint and the hash of its weights (an
    adapter is a few MB; the fingerprint alone would mistake a retrained adapter of the same
    shape for the one a run directory started from)."""
    if adapter is None:
        return None
    weights = sorted(Path(adapter).glob("*.safetensors"))
    return ":".join([model_fingerprint(Path(adapter)), *(file_sha256(w)[:16] for w in weights)])


def checkpoint_step(checkpoint: Path) -> int:
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
        step = checkpoint_step(Path(last))
        finished = step >= max_steps if max_steps > 0 else (run_dir / "completed.json").is_file()
        if not finished:
            return run_dir, Path(last)
        attempt += 1


#: what resuming needs of a checkpoint (the tokenizer and the arguments come from the command)
RESUME_FILES = (
    "adapter_model.safetensors",
    "adapter_config.json",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
)

#: what a run records beside TRL's state (GRPO: every reward and packet so far), saved into each
#: checkpoint so a resumed run's metadata covers the whole run; carried when present (a
#: checkpoint from before it existed resumes too, its metadata then says from which step)
RUN_RECORD = "run-record.json"


def check_resumable(checkpoint: Path) -> None:
    """Refuse a folder without every RESUME_FILES: resuming without the optimizer or the
    scheduler would silently restart Adam and the learning-rate schedule."""
    missing = [name for name in RESUME_FILES if not (Path(checkpoint) / name).is_file()]
    if missing:
        raise TrainingError(f"{checkpoint} lacks {', '.join(missing)}: not a resumable checkpoint")


def carry_checkpoint(
    checkpoint: Path, dest: Path, prepare: Callable[[Path], None] | None = None
) -> Path:
    """`checkpoint`'s RESUME_FILES into `dest` (replaced whole: staged, `prepare(staging)` to
    add what the carrier needs, e.g. its lineage, then renamed), for a run to continue on
    another host (`resume_from`). Returns `dest`."""
    import shutil

    check_resumable(checkpoint)
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in RESUME_FILES:
        shutil.copy2(Path(checkpoint) / name, staging / name)
    if (Path(checkpoint) / RUN_RECORD).is_file():
        shutil.copy2(Path(checkpoint) / RUN_RECORD, staging / RUN_RECORD)
    if prepare is not None:
        prepare(staging)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def later_checkpoint(own: Path | None, given: Path | None) -> Path | None:
    """Of the run directory's own checkpoint and one `given` (saved elsewhere: a paused run
    carried from another host), the one further along; `given` must be a checkpoint."""
    if given is None:
        return own
    check_resumable(Path(given))
    if own is not None and checkpoint_step(own) >= checkpoint_step(Path(given)):
        return own
    return Path(given)


def make_time_budget(stop_after_s: float, cycle: int = 1) -> Any:
    """A TrainerCallback that saves a checkpoint and stops the run before it would overrun
    `stop_after_s` seconds of training in this invocation (model loading and the final save
    are outside it): at the end of a cycle of `cycle` steps counted from where this invocation
    started (GRPO: `num_iterations`, TRL's generation cycle, which restarts on resume; a pause
    mid-cycle would throw away the rest of a generated batch), once the time spent plus the
    longest cycle seen would pass the budget. The first cycle always runs (nothing to estimate
    from). `stopped_at`: the step it stopped at, None if it did not."""
    if cycle < 1:
        raise ValueError(f"cycle must be >= 1, got {cycle}")
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def __init__(self) -> None:
            self.started = 0.0
            self.cycle_started = 0.0
            self.longest_cycle = 0.0
            self.start_step = 0
            self.stopped_at: int | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.started = self.cycle_started = time.perf_counter()
            self.start_step = int(state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if (state.global_step - self.start_step) % cycle:
                return
            now = time.perf_counter()
            self.longest_cycle = max(self.longest_cycle, now - self.cycle_started)
            self.cycle_started = now
            finished = state.global_step >= state.max_steps
            if not finished and now - self.started + self.longest_cycle > stop_after_s:
                control.should_save = True
                control.should_training_stop = True
                self.stopped_at = int(state.global_step)

    return TimeBudget()


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


# Why this size: the provenance a published version records, each a named keyword
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


def save_adapter(trainer: Any) -> Callable[[Path], None]:
    """A writer of the trained adapter alone: the tokenizer is the base model's, which its
    package ships, so a version holds no 3.5 MB copy of it."""

    def write(directory: Path) -> None:
        trainer.model.save_pretrained(str(directory))

    return write


def finish_run(run_dir: Path, result: TrainResult) -> None:
    write_json(
        run_dir / "completed.json",
        {"version": result.version, "steps": result.metadata.get("steps")},
    )
