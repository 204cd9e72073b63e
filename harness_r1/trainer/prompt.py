"""The engineer's prompt: a system message that teaches the hook surface, a user message that
renders one FailurePacket.

Everything the sandbox enforces is generated from the code that enforces it, so the prompt
cannot drift from the rules: the effects per hook from `contracts.ALLOWED_EFFECTS` and the
parsers in `harness/effects.py` (probed, not paraphrased), the ctx keys from
`harness/context.EpisodeView.ctx`, the limits from `sandbox.static.StaticLimits`, the scope
from `sandbox/hooklib.py`, the catchable exceptions and banned names from the static checker.
What stays hand-written is one line of meaning per (hook, effect), per hook and per banned
construct; the tests check that each of those tables covers its source of truth.

The prompt is compact on purpose (the embedded engineer is a 135M model): the system message
with its examples stays under ~1,500 SmolLM2 tokens (tested). Rendering is deterministic: the
same packet and examples give the same messages, byte for byte.

Why one module: the one rendering of a packet the engineer is trained, evaluated
and served on; its token budget and its text change together, so SFT, GRPO and the daemon prompt
alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from harness_r1.contracts import (
    ALLOWED_EFFECTS,
    EffectKind,
    FailurePacket,
    HookCode,
    HookName,
    PacketEpisode,
    Patch,
    Snippet,
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
    Code,
    StaticLimits,
    reference_patches,
    render_completion,
)
from harness_r1.trainer.teacher import TemplateChoice
from harness_r1.trainer.templates import templates_for

ChatMessage = dict[str, str]

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


# -- examples -------------------------------------------------------------------------------

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


# -- the user message -----------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    text = text.replace("\r", "")
    if len(text) <= limit:
        return text
    return text[:limit] + f" ...[{len(text) - limit} chars cut]"


def _quote(text: str, limit: int) -> str:
    """One line: newlines shown as \\n so a snippet never breaks the layout."""
    return _cut(text, limit).replace("\n", "\\n")


def _episode_lines(episode: PacketEpisode, limit: int) -> list[str]:
    outcome = "succeeded" if episode.success else "failed"
    lines = [
        f"### {episode.masked_task_id} ({episode.task_type}): {outcome}, "
        f"{episode.termination} after {episode.steps} steps, reward {episode.reward:.2f}",
        "Task: " + _quote(episode.instruction, max(limit * 2, 400)),
    ]
    if episode.constraints:
        lines.append("Constraints: " + "; ".join(episode.constraints))
    if episode.failure_step is not None:
        streak = (
            f" (streak of {episode.failure_streak} repeated/invalid)"
            if episode.failure_streak
            else ""
        )
        lines.append(f"Failure point: step {episode.failure_step}{streak}")
    previous: Snippet | None = None
    for snippet in episode.snippets:
        flags = f" [{', '.join(snippet.flags)}]" if snippet.flags else ""
        same = (
            previous is not None
            and snippet.action == previous.action
            and snippet.observation == previous.observation
        )
        if same and previous is not None:
            lines.append(f"step {snippet.step}{flags}: same as step {previous.step}")
        else:
            lines.append(f"step {snippet.step}{flags} action: {_quote(snippet.action, limit)}")
            lines.append(f"  env: {_quote(snippet.observation, limit)}")
        previous = snippet
    return lines


def packet_text(packet: FailurePacket, config: PromptConfig | None = None) -> str:
    """The packet as the engineer reads it: compact, deterministic plain text."""
    config = config or PromptConfig()
    episodes = packet.episodes[: config.lean_episodes] if config.lean else packet.episodes
    signals = packet.signals.model_dump()
    counted = ", ".join(f"{name} {value}" for name, value in signals.items() if value)
    types = sorted({e.task_type for e in packet.episodes})
    lines = [
        f"Failure report, env {packet.env}: target {packet.target.model_id} "
        f"(version {packet.target.version}), harness {packet.harness_version}.",
        f"{packet.failures} of {packet.batch_size} episodes failed; {len(episodes)} shown.",
        f"Task types: {', '.join(types) if types else 'none'}.",
        f"Signals: {counted or 'none'}.",
    ]
    lines += _lean_incumbent_lines(packet, config) if config.lean else _incumbent_lines(packet)
    limit = config.lean_snippet_chars if config.lean else config.snippet_chars
    for episode in episodes:
        if config.lean:
            episode = episode.model_copy(
                update={"snippets": episode.snippets[-config.lean_snippets :]}
            )
        lines += ["", *_episode_lines(episode, limit)]
    lines += [
        "",
        f"Write one patch for env {packet.env} that makes the target succeed on tasks like "
        "these. Answer as <think>...</think><patch>...</patch>.",
    ]
    return "\n".join(lines)


def _incumbent_lines(packet: FailurePacket) -> list[str]:
    """The live overlay's hooks: the engineer adds what is missing, or replaces a hook."""
    if not packet.incumbent:
        return []
    lines = [
        "",
        "## Live overlay (these failures happened with it; your patch is added to it)",
        "Your hooks run after these ones. A section `# === hook: NAME (replace) ===` runs "
        "instead of the live one, `(remove)` (no code) stops it; do not repeat what is already "
        "here.",
    ]
    for hook in packet.incumbent:
        lines += [f"### {hook.hook} ({hook.links} link{'s' if hook.links > 1 else ''})", hook.code]
    return lines


_DOCSTRING = re.compile(r"^\s*(?:'{3}|\"{3})\s*(.+?)\s*(?:'{3}|\"{3}|$)", re.M)


def _lean_incumbent_lines(packet: FailurePacket, config: PromptConfig) -> list[str]:
    """The live overlay for a small engineer: per hook, what each link does (its docstring's
    first line) instead of its code, which took ~1.4k of a ~2.3k-token prompt on an incumbent
    of three templates. Enough to add what is missing or replace a hook by name."""
    if not packet.incumbent:
        return []
    lines = [
        "",
        "## Live overlay (your patch is added to it; a section `# === hook: NAME (replace) ===` "
        "runs instead of the live one, `(remove)` stops it)",
    ]
    for hook in packet.incumbent:
        said = _DOCSTRING.findall(hook.code) or [hook.code.strip().splitlines()[-1].strip()]
        summary = _quote("; ".join(said), config.lean_snippet_chars * 2)
        lines.append(f"- {hook.hook} ({hook.links} link{'s' if hook.links > 1 else ''}): {summary}")
    return lines


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


def limits_stated(limits: StaticLimits) -> dict[str, int]:
    """The StaticLimits fields the prompt states (all but the per-hook violation cap)."""
    return {
        f.name: getattr(limits, f.name)
        for f in fields(limits)
        if f.name != "max_violations_per_hook"
    }
