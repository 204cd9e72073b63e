"""The engineer's prompt: a system message that teaches the hook surface, a user message that
renders one FailurePacket.

Everything the sandbox enforces is generated from the code that enforces it, so the prompt
cannot drift from the rules: the effects per hook from `contracts.ALLOWED_EFFECTS` and the
parsers in `harness/effects.py` (probed, not paraphrased), the ctx keys from
`harness/context.EpisodeView.ctx`, the limits from `sandbox.static_report.StaticLimits`, the scope
from `sandbox/hooklib.py`, the catchable exceptions and banned names from the static checker.
What stays hand-written is one line of meaning per (hook, effect), per hook and per banned
construct (`prompt_meanings`); the tests check that each of those tables covers its source of
truth.

The prompt is compact on purpose (the embedded engineer is a 135M model): the system message
with its examples stays under ~1,500 SmolLM2 tokens (tested). Rendering is deterministic: the
same packet and examples give the same messages, byte for byte.

Why a module of its own: the one rendering of a packet the engineer is trained, evaluated and
served on is put together here (`engineer_messages`), and the system message it opens with is
generated here from the sandbox's own tables, full and lean; its token budget and its text
change together, so SFT, GRPO and the daemon prompt alike. What it renders comes from beside
it: the configuration (`prompt_config`), the hand-written meanings (`prompt_meanings`), the
examples (`prompt_examples`) and the packet's text (`prompt_packet`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness_r1.contracts import (
    ALLOWED_EFFECTS,
    EffectKind,
    FailurePacket,
    HookName,
    TaskSpec,
)
from harness_r1.harness import (
    HISTORY_IN_CTX,
    MAX_EFFECT_TEXT,
    MAX_SKILLS,
    MAX_SKILLS_CHARS,
    MAX_STATE_BYTES,
    EpisodeView,
    JunkResult,
    parse_start_effects,
    parse_step_effect,
)
from harness_r1.sandbox import (
    ALLOWED_BUILTINS,
    BANNED_NAMES,
    CATCHABLE_EXCEPTIONS,
    MATH_EXPORTS,
    RE_EXPORTS,
    StaticLimits,
    render_completion,
)
from harness_r1.trainer.prompt_config import PromptConfig
from harness_r1.trainer.prompt_examples import PromptExample, default_examples
from harness_r1.trainer.prompt_meanings import (
    BANNED_CONSTRUCTS,
    EFFECT_MEANINGS,
    HOOK_EXTRA_CTX,
    HOOK_MEANINGS,
)
from harness_r1.trainer.prompt_packet import packet_text
from harness_r1.trainer.teacher import TemplateChoice
from harness_r1.trainer.templates import templates_for

ChatMessage = dict[str, str]


# -- the output format ----------------------------------------------------------------------

#: The answer's shape as the system prompt shows it, a line each.
ANSWER_SHAPE = (
    "<think>one line</think><patch>",
    "# description: one line",
    "# === hook: NAME ===",
    "def hook(ctx, state):",
    "    ...",
    "</patch>",
)


# -- the system message ---------------------------------------------------------------------


def ctx_keys() -> list[str]:
    """The ctx keys every hook gets, from the runtime's own snapshot."""
    task = TaskSpec(env="env", split="s", task_id="t", task_type="k", instruction="i")
    return list(EpisodeView(task=task, max_steps=1).ctx())


def _nested_keys(key: str) -> list[str]:
    task = TaskSpec(env="env", split="s", task_id="t", task_type="k", instruction="i")
    value = EpisodeView(task=task, max_steps=1).ctx()[key]
    return list(value) if isinstance(value, dict) else []


def _string_shorthand(hook: HookName) -> EffectKind | None:
    """What a plain string returned by `hook` means, asked of the effect parsers themselves."""
    try:
        if hook == HookName.EPISODE_START:
            return EffectKind.SKILLS if parse_start_effects("x").skills else None
        effect = parse_step_effect(hook, "x")
    except JunkResult:
        return None
    return None if effect is None else effect.kind


def _needs_text(hook: HookName, kind: EffectKind) -> bool:
    try:
        parse_step_effect(hook, {"effect": str(kind)})
    except JunkResult:
        return True
    return False


def _effect_shapes(hook: HookName) -> str:
    allowed = sorted(ALLOWED_EFFECTS[hook], key=str)
    if hook == HookName.EPISODE_START:
        parts = []
        for kind in allowed:
            parts.append(
                f'"{kind}": [str, ...]' if kind == EffectKind.SKILLS else f'"{kind}": {{}}'
            )
        return "{" + ", ".join(parts) + "} (either key)"
    shapes = []
    with_text = [str(k) for k in allowed if _needs_text(hook, k)]
    without = [str(k) for k in allowed if not _needs_text(hook, k)]
    shapes += [f'{{"effect": "{k}"}}' for k in without]
    if with_text:
        kinds = "|".join(with_text)
        shapes.append(f'{{"effect": "{kinds}", "text": str}}')
    return " or ".join(shapes)


def _hooks_section(hooks: Sequence[HookName]) -> list[str]:
    lines = [
        "## Hooks",
        "Each hook is Python code defining `def hook(ctx, state):` and helpers. `state`: a dict "
        f"shared by the hooks of an episode (JSON, at most {MAX_STATE_BYTES} bytes). `ctx`: a "
        "read-only dict:",
    ]
    common = []
    for key in ctx_keys():
        nested = _nested_keys(key)
        if key == "history":
            common.append(f"history (last {HISTORY_IN_CTX} {{action, observation}})")
        elif nested:
            common.append(f"{key} ({', '.join(nested)})")
        else:
            common.append(key)
    lines.append("- all hooks: " + ", ".join(common))
    for hook, extra in HOOK_EXTRA_CTX.items():
        if hook in hooks:
            lines.append(f"- {hook} also: {', '.join(extra)}")
    lines.append(
        f"Return None for no effect. Effects (any text at most {MAX_EFFECT_TEXT} chars; "
        "anything else is ignored):"
    )
    for hook in hooks:
        allowed = sorted(ALLOWED_EFFECTS[hook], key=str)
        meanings = "; ".join(
            f"{kind}: {EFFECT_MEANINGS.get((hook, kind), str(kind))}" for kind in allowed
        )
        shorthand = _string_shorthand(hook)
        plain = f"; a plain str = {shorthand}" if shorthand is not None else ""
        lines.append(
            f"- {hook} ({HOOK_MEANINGS.get(hook, str(hook))}): return {_effect_shapes(hook)}"
            f"{plain}. {meanings}."
        )
    lines.append(
        f"  At most {MAX_SKILLS} skills, {MAX_SKILLS_CHARS} chars in all. A hook that raises or "
        "returns junk has no effect."
    )
    return lines


def _number(value: int) -> str:
    """10**k for a power of ten above 10**4 (fewer tokens), else the digits."""
    digits = str(value)
    if value > 10**4 and digits == "1" + "0" * (len(digits) - 1):
        return f"10**{len(digits) - 1}"
    return digits


def _math_left_out() -> list[str]:
    public = {n for n in dir(math) if not n.startswith("_")}
    return sorted(public - set(MATH_EXPORTS))


def _rules_section(limits: StaticLimits) -> list[str]:
    re_functions = [n for n in RE_EXPORTS if n.islower()]
    builtins = [n for n in ALLOWED_BUILTINS if n not in CATCHABLE_EXCEPTIONS]
    banned_names = [n for n in BANNED_NAMES if not n.startswith("_")]
    constructs = ", ".join(BANNED_CONSTRUCTS.values())
    return [
        "## Sandbox rules (a patch breaking one is rejected)",
        f"- Per hook: at most {limits.max_source_chars} chars, {limits.max_nodes} syntax nodes, "
        f"{limits.max_helpers} helpers besides hook, string literals of "
        f"{limits.max_string_literal} chars; only defs at top level; no literal over "
        f"{_number(limits.max_power_result)} or repetition/range over "
        f"{_number(limits.max_literal_count)}.",
        f"- Not allowed: {constructs}; .format/.format_map (use f-strings or +).",
        "- Not allowed even as variable names: " + ", ".join(banned_names) + "; module names.",
        "- except only: " + ", ".join(CATCHABLE_EXCEPTIONS) + ", re.error.",
        "- In scope, nothing else: ctx, state, your functions, "
        f"re ({', '.join(re_functions)}, flags), "
        f"math (all but {', '.join(_math_left_out())}), similarity(a, b) -> 0..1, "
        "closest(text, options, cutoff=0.0) -> best option or None, and " + ", ".join(builtins),
    ]


def _format_section(hooks: Sequence[HookName]) -> list[str]:
    # the hook names as separate choices: written as one "a|b|c" string, a small engineer
    # copied the whole string as a hook name (seen in a held-out run)
    names = ", ".join(hooks)
    return [
        "## Answer format",
        "Think briefly, then one patch:",
        *ANSWER_SHAPE,
        f"NAME is one of {names}; each hook at most once. The code is plain Python as written, "
        "nothing quoted or escaped. Against a live overlay a section may be "
        "`# === hook: NAME (replace) ===` (instead of its hook) or `(remove)` (no code).",
    ]


def system_prompt(
    env: str,
    examples: Sequence[PromptExample] | None = None,
    config: PromptConfig | None = None,
) -> str:
    """The engineer's system message for one env (everything but the packet)."""
    config = config or PromptConfig()
    chosen = default_examples(env, config) if examples is None else list(examples)
    if config.lean:
        return _lean_system_prompt(env, chosen[-1:], config)
    task = (
        ADVISORY_TASK
        if config.advisory
        else "carry task knowledge (plans, skills, forced steps), fix invalid actions, break "
        "loops; never use task ids."
    )
    lines = [
        f"You are a harness engineer. A frozen LLM agent (the target) fails {env} tasks. Write a "
        "patch, Python hooks run around the target, that raises its success on tasks like those "
        f"in the report: {task}",
        "",
        *_hooks_section(config.hooks),
        "",
        *_rules_section(config.limits),
        "",
        *_format_section(config.hooks),
    ]
    for number, example in enumerate(chosen, start=1):
        lines += ["", f"Example {number}:", render_completion(example.patch, example.think)]
    return "\n".join(lines)


def _lean_system_prompt(env: str, examples: Sequence[PromptExample], config: PromptConfig) -> str:
    """The same surface in fewer tokens: what each hook may return, the ctx keys, the rules a
    small engineer breaks most (imports, while, lambda, names, sizes), the answer format."""
    limits = config.limits
    effects = [f"- {hook}: return {_effect_shapes(hook)}" for hook in config.hooks]
    extra = "; ".join(
        f"{hook} also {', '.join(keys)}"
        for hook, keys in HOOK_EXTRA_CTX.items()
        if hook in config.hooks
    )
    names = ", ".join(config.hooks)
    task = (
        ADVISORY_TASK
        if config.advisory
        else "task knowledge, fixing invalid actions, breaking loops."
    )
    lines = [
        f"You are a harness engineer. A frozen agent fails {env} tasks. Write Python hooks run "
        f"around it that make it succeed: {task}",
        "Each hook: `def hook(ctx, state):` returning None or an effect:",
        *effects,
        f"ctx keys: {', '.join(ctx_keys())}{'; ' + extra if extra else ''}. state: a dict kept "
        "across the episode.",
        f"Rules: at most {limits.max_source_chars} chars a hook; no import, while, lambda, class, "
        "with, raise, global, names starting with _, .format; in scope only re, math, "
        "similarity(a, b), closest(text, options, cutoff) and plain builtins.",
        "Answer:",
        *ANSWER_SHAPE,
        f"with NAME one of {names}, one section per hook, code as plain Python.",
    ]
    for example in examples:
        lines += ["Example:", render_completion(example.patch, example.think)]
    return "\n".join(lines + template_menu(env, config.hooks, advisory=config.advisory))


#: What the engineer is asked for under the gate's advisory profile (sandbox/gate.py).
ADVISORY_TASK = (
    "guide and check the model, never act for it: skills and notes with task knowledge, hints "
    "after feedback, vetoes of bad proposals, rewrites of the model's own proposal into a valid "
    "command, recovery from loops; never use task ids. Forced actions are rejected: a patch "
    "that forces more than a tenth of the steps, or wins tasks without the model, fails the gate."
)


def template_menu(
    env: str, hooks: Sequence[HookName] = tuple(HookName), *, advisory: bool = False
) -> list[str]:
    """The library templates an engineer may name instead of writing code (a template call,
    `trainer.template_calls`), each as the call of its default parameters, among `hooks`.

    Why in the prompt: an SFT engineer trained on calls but never shown the
    library, invented names from the packet's task types (`alfworld_pick_and_place_simple`)
    and every ALFWorld proposal was refused as a bad call; a name it can copy is a name it
    gets right. Defaults only: the values a packet needs are what the cold start teaches."""
    calls = [
        TemplateChoice.of(t.name).label()
        for t in templates_for(env)
        if t.in_menu and t.hook in hooks and (t.role == "advisory" or not advisory)
    ]
    if not calls:
        return []
    return [
        "Or name one library template instead of code: the patch's only line "
        "`# description: templates: NAME. NAME(params).` with NAME(params) one of "
        + "; ".join(calls)
        + "."
    ]


# -- the two messages -----------------------------------------------------------------------


def engineer_messages(
    packet: FailurePacket,
    examples: Sequence[PromptExample] | None = None,
    config: PromptConfig | None = None,
) -> list[ChatMessage]:
    """[system, user]: the hook surface and rules, then the packet. Deterministic."""
    return [
        {"role": "system", "content": system_prompt(packet.env, examples, config)},
        {"role": "user", "content": packet_text(packet, config)},
    ]


def engineer_prompt_text(
    packet: FailurePacket,
    examples: Sequence[PromptExample] | None = None,
    config: PromptConfig | None = None,
    *,
    tokenizer: Any = None,
) -> str:
    """The prompt as one string: through the tokenizer's chat template (with the generation
    prompt) when one is given, else the two messages joined plainly."""
    messages = engineer_messages(packet, examples, config)
    if tokenizer is not None:
        text: str = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return text
    return "\n\n".join(m["content"] for m in messages)
