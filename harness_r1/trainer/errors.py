"""The error every training entry point raises for inputs it cannot use, and the signal of a
run that stopped at its time budget."""

from pathlib import Path


class TrainingError(RuntimeError):
    """Training could not start or its inputs are unusable (with what to do about it)."""


class TrainingPaused(RuntimeError):
    """A run stopped at its time budget before `max_steps`: its last checkpoint is saved and
    nothing is published. Rerun the same command to continue (or pass the checkpoint as
    `resume_from` on another host)."""

    def __init__(self, run_dir: Path, checkpoint: Path, step: int, max_steps: int) -> None:
        super().__init__(
            f"paused at step {step} of {max_steps}: checkpoint {checkpoint}; run the same "
            "command again to continue"
        )
        self.run_dir = run_dir
        self.checkpoint = checkpoint
        self.step = step
        self.max_steps = max_steps
