"""Run directories and checkpoints shared by SFT and GRPO (trainer.runs): which checkpoint a
run resumes from, and the time budget that pauses a run at a cycle boundary."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness_r1.trainer.errors import TrainingError
from harness_r1.trainer.runs import (
    RESUME_FILES,
    carry_checkpoint,
    later_checkpoint,
    make_time_budget,
    use_bf16,
)


def _checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    """A checkpoint folder at `step` (`complete`: with every file resuming needs)."""
    folder.mkdir(parents=True)
    for name in RESUME_FILES if complete else ():
        (folder / name).write_text(name)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def test_a_carried_checkpoint_wins_only_when_it_is_further(tmp_path: Path) -> None:
    own = _checkpoint(tmp_path / "run" / "checkpoint-4", 4)
    carried = _checkpoint(tmp_path / "carried", 6)
    assert later_checkpoint(own, carried) == carried
    assert later_checkpoint(None, carried) == carried
    assert later_checkpoint(own, None) == own
    behind = _checkpoint(tmp_path / "behind", 2)
    assert later_checkpoint(own, behind) == own
    level = _checkpoint(tmp_path / "level", 4)
    assert later_checkpoint(own, level) == own  # a tie: the run directory's own


def test_a_carried_folder_that_could_not_resume_whole_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match="not a resumable checkpoint"):
        later_checkpoint(None, tmp_path / "empty")
    partial = _checkpoint(tmp_path / "partial", 6, complete=False)  # state, no optimizer
    with pytest.raises(TrainingError, match="optimizer.pt"):
        later_checkpoint(None, partial)


def _drive(
    budget: Any,
    steps: int,
    max_steps: int,
    step_seconds: float,
    clock: list[float],
    start: int = 0,
) -> Any:
    """Steps start+1..start+`steps` through the callback on a fake clock, each `step_seconds`
    long; the control of the step it stopped at (or of the last one)."""
    state = SimpleNamespace(global_step=start, max_steps=max_steps)
    budget.on_train_begin(None, state, SimpleNamespace())
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    for step in range(start + 1, start + steps + 1):
        clock[0] += step_seconds
        state.global_step = step
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        budget.on_step_end(None, state, control)
        if control.should_training_stop:
            break
    return control


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The time the budget reads (trainer.runs' perf_counter), moved by `_drive`."""
    now = [0.0]
    monkeypatch.setattr("harness_r1.trainer.runs.time.perf_counter", lambda: now[0])
    return now


def test_the_time_budget_stops_at_a_cycle_boundary_before_it_would_overrun(
    clock: list[float],
) -> None:
    budget = make_time_budget(stop_after_s=100.0, cycle=4)
    # 10 s a step, 40 s a cycle: after step 4 (40 s) one more cycle fits (80 s); after step 8
    # (80 s) another would end at 120 s, past the budget: stop there, saving a checkpoint
    control = _drive(budget, steps=20, max_steps=20, step_seconds=10.0, clock=clock)
    assert (control.should_save, control.should_training_stop) == (True, True)
    assert budget.stopped_at == 8


def test_a_resumed_run_counts_its_cycles_from_where_it_resumed(clock: list[float]) -> None:
    """TRL's generation cycle restarts on resume: resumed at step 10 with cycles of 4, the
    cycles end at 14, 18, ... (not at 12, 16, which would cut a generated batch)."""
    budget = make_time_budget(stop_after_s=100.0, cycle=4)
    control = _drive(budget, steps=20, max_steps=40, step_seconds=10.0, clock=clock, start=10)
    assert control.should_training_stop and budget.stopped_at == 18


def test_the_time_budget_never_stops_a_run_at_its_last_step_or_mid_cycle(
    clock: list[float],
) -> None:
    budget = make_time_budget(stop_after_s=1.0, cycle=2)
    control = _drive(budget, steps=1, max_steps=2, step_seconds=10.0, clock=clock)
    assert not control.should_training_stop  # mid-cycle: the batch is not used up yet
    budget = make_time_budget(stop_after_s=1.0, cycle=2)
    control = _drive(budget, steps=2, max_steps=2, step_seconds=10.0, clock=clock)
    assert not control.should_training_stop and budget.stopped_at is None  # the run is done


def test_carrying_a_checkpoint_without_its_optimizer_is_refused(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "checkpoint-2", 2, complete=False)
    with pytest.raises(TrainingError, match="optimizer.pt"):
        carry_checkpoint(checkpoint, tmp_path / "carried")
    assert not (tmp_path / "carried").exists()


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("cpu_bf16", [False, True])
def test_cpu_bf16_reaches_both_trainers_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_bf16: bool, native: bool
) -> None:
    """Mixed precision on CPU only when asked (fp32 stays the default: the committed
    engineers were trained in it), and only on a CPU that computes bf16 natively (the host's
    flags stand in for both kinds of CPU)."""
    from harness_r1.models import cpu
    from harness_r1.trainer.grpo import GrpoSettings, grpo_config
    from harness_r1.trainer.sft import SftSettings, sft_config

    flags = frozenset({"avx2", "amx_bf16"} if native else {"avx2"})
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
    sft = sft_config(SftSettings(max_steps=1, cpu_bf16=cpu_bf16), tmp_path)
    grpo = grpo_config(GrpoSettings(cpu_bf16=cpu_bf16), tmp_path, max_steps=1)
    assert (sft.bf16, grpo.bf16) == (cpu_bf16 and native, cpu_bf16 and native)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (frozenset({"avx2", "avx512f", "avx512_bf16"}), True),
        (frozenset({"avx2", "amx_bf16", "amx_tile"}), True),
        (frozenset({"avx2", "fma"}), False),  # torch would emulate bf16: ~60x slower products
        (frozenset(), False),
    ],
)
def test_cpu_bf16_is_taken_only_where_the_cpu_computes_it(
    flags: frozenset[str], expected: bool
) -> None:
    assert use_bf16(use_cpu=True, cpu_bf16=True, flags=flags) is expected
    assert use_bf16(use_cpu=True, cpu_bf16=False, flags=flags) is False  # asked for or not at all


def test_a_carried_checkpoint_holds_what_resuming_needs_and_its_carrier_notes(
    tmp_path: Path,
) -> None:
    checkpoint = _checkpoint(tmp_path / "run" / "checkpoint-8", 8)
    (checkpoint / "tokenizer.json").write_text("{}")  # the command brings its own tokenizer
    dest = tmp_path / "carried"
    _checkpoint(dest, 4)  # an older carried checkpoint: replaced whole

    def note(staging: Path) -> None:
        (staging / "lineage.json").write_text("{}")

    assert carry_checkpoint(checkpoint, dest, note) == dest
    assert sorted(p.name for p in dest.iterdir()) == sorted([*RESUME_FILES, "lineage.json"])
    assert json.loads((dest / "trainer_state.json").read_text())["global_step"] == 8
    assert not dest.with_name("carried.partial").exists()
