"""The error every training entry point raises for inputs it cannot use."""


class TrainingError(RuntimeError):
    """Training could not start or its inputs are unusable (with what to do about it)."""
