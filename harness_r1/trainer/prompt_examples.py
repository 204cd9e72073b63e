"""The worked examples of the engineer's system message: the generic snap and loop examples,
and one hook of an env's reference patch, shown in the exact output format.

Why a module of its own: which examples a prompt shows depends on the env, the hooks the
engineer may write and the advisory profile, and the examples are code that must pass the
sandbox (tested per env); the system message only renders what `default_examples` chose.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.sandbox import reference_patches
from harness_r1.trainer.prompt_config import PromptConfig

_THINK_FOR_HOOK: dict[HookName, str] = {
    HookName.EPISODE_START: (
        "The target lacks task knowledge: parse the task into state and give it a plan."
    ),
    HookName.PRE_DECISION: "Remind the target of the plan before it decides.",
    HookName.PRE_ACTION: "Fix or replace the target's actions before they reach the env.",
    HookName.POST_FEEDBACK: "React to the env's answer with a hint or the next action.",
}


@dataclass(frozen=True)
class PromptExample:
    """One worked example: the think text and the patch, shown in the exact output format."""

    think: str
    patch: Patch


_SNAP_CODE = """def hook(ctx, state):
    options = ctx['admissible_actions']
    proposed = ctx['proposed_action']
    if not options or proposed in options:
        return None
    best = closest(proposed, options, 0.6)
    if best:
        return {'effect': 'rewrite', 'text': best}
    return {'effect': 'veto', 'text': 'Answer with one of: ' + ', '.join(options[:8])}
"""

_LOOP_CODE = """def hook(ctx, state):
    counters = ctx['counters']
    if counters['repeated_action_streak'] >= 2 or counters['nothing_happens_streak'] >= 2:
        return 'You are repeating yourself. Try a different action.'
    return None
"""

SNAP_EXAMPLE = PromptExample(
    think="Most actions are invalid: snap them to the closest admissible action.",
    patch=Patch(
        env="any",
        description="Snap invalid actions to the closest admissible one.",
        hooks=[HookCode(hook=HookName.PRE_ACTION, code=_SNAP_CODE)],
    ),
)
LOOP_EXAMPLE = PromptExample(
    think="The target repeats actions that do nothing: tell it to change course.",
    patch=Patch(
        env="any",
        description="Break loops of repeated or useless actions.",
        hooks=[HookCode(hook=HookName.POST_FEEDBACK, code=_LOOP_CODE)],
    ),
)


def _first_sentence(text: str) -> str:
    head = text.split(". ", 1)[0].strip()
    return head if head.endswith(".") else head + "."


def _self_contained(code: str) -> bool:
    """Works alone: reads nothing another hook of its patch put into `state`."""
    return re.search(r"\bstate\s*(\[|\.get\b)", code) is None


def reference_example(
    env: str, max_chars: int = 600, hooks: Sequence[HookName] = tuple(HookName)
) -> PromptExample | None:
    """One hook of the env's reference patch among `hooks`, within `max_chars`: its
    episode_start (it carries task knowledge), else its shortest self-contained hook; None if
    there is no such hook."""
    patches = reference_patches(env)
    if not patches:
        return None
    patch = patches[sorted(patches)[0]]
    fitting = [h for h in patch.hooks if len(h.code) <= max_chars and h.hook in hooks]
    start = [h for h in fitting if h.hook == HookName.EPISODE_START]
    alone = [h for h in fitting if _self_contained(h.code)]
    if not start and not alone:
        return None
    chosen = start[0] if start else min(alone, key=lambda h: (len(h.code), str(h.hook)))
    trimmed = Patch(env=env, description=_first_sentence(patch.description), hooks=[chosen])
    return PromptExample(think=_THINK_FOR_HOOK[chosen.hook], patch=trimmed)


def default_examples(env: str, config: PromptConfig | None = None) -> list[PromptExample]:
    """The generic snap example, then one hook of the env's reference patch (or the loop
    breaker for an env without one); an example that writes a hook the engineer may not
    write is left out (the loop breaker stands in where it may)."""
    config = config or PromptConfig()
    reference = reference_example(env, config.max_example_chars, config.hooks)

    def writable(example: PromptExample) -> bool:
        return {h.hook for h in example.patch.hooks} <= set(config.hooks)

    # the reference patches are solvers: under the advisory profile, the generic loop breaker
    own = LOOP_EXAMPLE if config.advisory else reference or LOOP_EXAMPLE
    chosen = [e for e in (SNAP_EXAMPLE, own) if writable(e)]
    if len(chosen) < 2 and writable(LOOP_EXAMPLE) and LOOP_EXAMPLE not in chosen:
        chosen.insert(0, LOOP_EXAMPLE)  # the env's own example stays last (the lean one)
    return chosen
