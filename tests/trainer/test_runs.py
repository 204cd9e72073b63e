"""Run directories and checkpoints shared by SFT and GRPO (trainer.runs): which checkpoint a
run resumes from, and the time budget that pauses a run at a cycle boundary."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness_r1.trainer.errors import TrainingError
from harness_r1.trainer.runs import carry_checkpoint, later_checkpoint, make_time_budget


def _checkpoint(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True)
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


def test_a_carried_folder_that_is_no_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match="not a checkpoint"):
        later_checkpoint(None, tmp_path / "empty")


def _drive(budget: Any, steps: int, max_steps: int, step_seconds: float, clock: list[float]) -> Any:
    """Steps 1..`steps` through the callback on a fake clock, each `step_seconds` long; the
    control of the step it stopped at (or of the last one)."""
    state = SimpleNamespace(global_step=0, max_steps=max_steps)
    budget.on_train_begin(None, state, SimpleNamespace())
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    for step in range(1, steps + 1):
        clock[0] += step_seconds
        state.global_step = step
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        budget.on_step_end(None, state, control)
        if control.should_training_stop:
            break
    return control


def test_the_time_budget_stops_at_a_cycle_boundary_before_it_would_overrun(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr("harness_r1.trainer.runs.time.perf_counter", lambda: clock[0])
    budget = make_time_budget(stop_after_s=100.0, cycle=4)
    # 10 s a step, 40 s a cycle: after step 4 (40 s) one more cycle fits (80 s); after step 8
    # (80 s) another would end at 120 s, past the budget: stop there, saving a checkpoint
    control = _drive(budget, steps=20, max_steps=20, step_seconds=10.0, clock=clock)
    assert (control.should_save, control.should_training_stop) == (True, True)
    assert budget.stopped_at == 8


def test_the_time_budget_never_stops_a_run_at_its_last_step_or_mid_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr("harness_r1.trainer.runs.time.perf_counter", lambda: clock[0])
    budget = make_time_budget(stop_after_s=1.0, cycle=2)
    control = _drive(budget, steps=1, max_steps=2, step_seconds=10.0, clock=clock)
    assert not control.should_training_stop  # mid-cycle: the batch is not used up yet
    budget = make_time_budget(stop_after_s=1.0, cycle=2)
    control = _drive(budget, steps=2, max_steps=2, step_seconds=10.0, clock=clock)
    assert not control.should_training_stop and budget.stopped_at is None  # the run is done


def test_carrying_a_checkpoint_without_its_optimizer_is_refused(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "checkpoint-2", 2)
    with pytest.raises(TrainingError, match="optimizer.pt"):
        carry_checkpoint(checkpoint, tmp_path / "carried")
    assert not (tmp_path / "carried").exists()


@pytest.mark.parametrize("cpu_bf16", [False, True])
def test_cpu_bf16_reaches_both_trainers_configs(tmp_path: Path, cpu_bf16: bool) -> None:
    """Mixed precision on CPU only when asked: fp32 stays the default (the committed
    engineers were trained in it)."""
    from harness_r1.trainer.grpo import GrpoSettings, grpo_config
    from harness_r1.trainer.sft import SftSettings, sft_config

    sft = sft_config(SftSettings(max_steps=1, cpu_bf16=cpu_bf16), tmp_path)
    grpo = grpo_config(GrpoSettings(cpu_bf16=cpu_bf16), tmp_path, max_steps=1)
    assert (sft.bf16, grpo.bf16, sft.use_cpu, grpo.use_cpu) == (cpu_bf16, cpu_bf16, True, True)
