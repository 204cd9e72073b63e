"""What the engineer's prompt is configured with: `PromptConfig`, the hooks an engineer may
write, and the static limits the prompt states.

Why a module of its own: the examples, the system message and the packet's rendering all read
one `PromptConfig`, and the CLI, the cold start, the held-out evaluation and the daemon's
wiring all build one; it sits below every part of the prompt so each imports it without
importing the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from harness_r1.contracts import HookName
from harness_r1.sandbox import StaticLimits


@dataclass(frozen=True)
class PromptConfig:
    """limits: the sandbox's static limits stated in the prompt (pass the configured ones).
    snippet_chars: the longest action/observation text of a snippet shown (the packet's own
    cut applies first; longer texts are cut again with a marker).
    max_example_chars: the longest reference hook taken as an example.
    """

    limits: StaticLimits = StaticLimits()
    snippet_chars: int = 200
    max_example_chars: int = 600
    # lean: the prompt for a small engineer (a 135M model on a CPU, where the ~2.5k-token
    # full prompt dominated every SFT and GRPO pass): the hook surface without the meanings,
    # the rules that reject most patches, one example, and of each of the first
    # `lean_episodes` episodes the last `lean_snippets` of its snippets (the packet cuts them
    # around the failure point) at `lean_snippet_chars` chars
    lean: bool = False
    lean_episodes: int = 2
    lean_snippets: int = 3
    lean_snippet_chars: int = 120
    # the hooks the engineer may write (issue 20's ablation removes one): the prompt teaches
    # only these, and `propose.classify` refuses a patch that writes another
    hooks: tuple[HookName, ...] = tuple(HookName)
    # the gate's advisory profile: the prompt asks for advice (skills, notes, hints, vetoes,
    # rewrites of the model's own proposal, recovery), not forced steps; its examples and its
    # template menu are advisory only
    advisory: bool = False


def hooks_without(removed: Sequence[str] = ()) -> tuple[HookName, ...]:
    """The hooks an engineer may write when `removed` are barred (issue 20's hook ablation),
    in HookName's order: PromptConfig.hooks, the same for the CLI and the benchmark."""
    barred = {str(hook) for hook in removed}
    return tuple(hook for hook in HookName if str(hook) not in barred)


def limits_stated(limits: StaticLimits) -> dict[str, int]:
    """The StaticLimits fields the prompt states (all but the per-hook violation cap)."""
    return {
        f.name: getattr(limits, f.name)
        for f in fields(limits)
        if f.name != "max_violations_per_hook"
    }
