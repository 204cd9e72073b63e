"""The null policy: a target that never produces a useful action (the canary's patch-alone
control).

Why: to tell a patch that helps the model decide from a patch that plays the task itself, the
canary runs each candidate once more with this policy in the model's place. Every call answers
the same fixed sentence, `NULL_OUTPUT`, which is no action in any env (ALFWorld answers it
"Nothing happens.", DBBench and WebShop refuse it as an invalid action), carries no task
information and does not change with the task, the step or the context. It is a fair null: it
cannot exploit what a hint says, so every success of such an episode is the harness's own
choice of actions (a force, or a rewrite into a command that solves), and an advisory patch
(notes, hints, vetoes, recovery) wins nothing with it. Rewrites of its sentence into an
admissible command count as the harness's too: the sentence proposed nothing.

It costs no model time, so the control adds env and hook time only.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_r1.models import Generation, GenerationRequest

NULL_OUTPUT = "I don't know."


class NullPolicy:
    """Answers `NULL_OUTPUT` to every request. `model_id` names it in trajectories, so a
    patch-alone episode is never mistaken for the target's."""

    model_id = "null-policy"
    version = "1"

    def __init__(self, max_batch: int = 64) -> None:
        self.max_batch = max_batch

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return [Generation(text=NULL_OUTPUT, tokens=0) for _ in requests]
