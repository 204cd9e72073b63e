"""The prompt's hand-written meanings: one line per hook, per (hook, effect) and per banned
construct, and the ctx keys each hook gets besides the common ones.

Everything else the prompt states about the sandbox is generated from the code that enforces it
(`prompt.py`); these tables are what stays hand-written. Why a module of its own: they are the
only text of the hook surface a person writes, and each of them must cover its source of truth
(`contracts.ALLOWED_EFFECTS`, `HookName`, the static checker's codes, the runtime's ctx), which
the tests check table by table; kept apart, they are read and extended in one place.
"""

from __future__ import annotations

from harness_r1.contracts import EffectKind, HookName
from harness_r1.sandbox import Code

#: What each hook is for and when it runs (one line each).
HOOK_MEANINGS: dict[HookName, str] = {
    HookName.EPISODE_START: "once, before the first step",
    HookName.PRE_DECISION: "before each model call",
    HookName.PRE_ACTION: "on the action the model proposed, before the env sees it",
    HookName.POST_FEEDBACK: "after the env answered an action",
}

#: What each allowed effect does, per hook (the tests check every allowed pair is here).
EFFECT_MEANINGS: dict[tuple[HookName, EffectKind], str] = {
    (HookName.EPISODE_START, EffectKind.SKILLS): "text added to the target's system prompt",
    (HookName.EPISODE_START, EffectKind.STATE): "the initial shared state",
    (HookName.PRE_DECISION, EffectKind.MESSAGE): "a note shown with this step's observation",
    (HookName.PRE_ACTION, EffectKind.ALLOW): "let the proposed action through",
    (HookName.PRE_ACTION, EffectKind.REWRITE): "replace the proposed action",
    (HookName.PRE_ACTION, EffectKind.VETO): "refuse it: the model is told why and asked again",
    (HookName.PRE_ACTION, EffectKind.FORCE): "take this action, whatever the model said",
    (HookName.POST_FEEDBACK, EffectKind.HINT): "text appended to the observation",
    (HookName.POST_FEEDBACK, EffectKind.FORCE): "the next action, without asking the model",
    (HookName.POST_FEEDBACK, EffectKind.RECOVER): (
        "drop the history and restart from the task plus this text"
    ),
}

#: ctx keys a hook gets besides the common ones (passed by the runtime as `ctx(**extra)`; the
#: tests run the real runtime and compare).
HOOK_EXTRA_CTX: dict[HookName, tuple[str, ...]] = {
    HookName.PRE_ACTION: ("proposed_action", "raw_output"),
    HookName.POST_FEEDBACK: ("action", "feedback"),
}

#: The banned syntax, by the static checker's code (the tests check every `banned_*` code of
#: a construct is here; names, modules and attributes are listed from their own tables).
BANNED_CONSTRUCTS: dict[Code, str] = {
    Code.BANNED_IMPORT: "import",
    Code.BANNED_WHILE: "while",
    Code.BANNED_LAMBDA: "lambda",
    Code.BANNED_CLASS: "class",
    Code.BANNED_WITH: "with",
    Code.BANNED_RAISE: "raise",
    Code.BANNED_GLOBAL: "global/nonlocal",
    Code.BANNED_ASYNC: "async/await",
    Code.BANNED_YIELD: "yield",
    Code.BANNED_DECORATOR: "decorators",
    Code.BANNED_FINALLY: "finally",
    Code.BANNED_TRY_STAR: "except*",
    Code.BARE_EXCEPT: "bare except",
    Code.ATTRIBUTE_ASSIGNMENT: "x.attr = ...",
    Code.PRIVATE_NAME: "names or attributes starting with _",
}
#: Codes that are not constructs (listed another way, or not syntax at all).
NOT_CONSTRUCTS: frozenset[Code] = frozenset(
    {Code.BANNED_NAME, Code.BANNED_MODULE, Code.BANNED_ATTRIBUTE}
)
