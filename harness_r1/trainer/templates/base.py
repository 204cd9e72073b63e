"""What a hook template is: typed parameters, a relevance score over packet features, and a
renderer that writes the hook's source.

A template renders ONE hook module (`def hook(ctx, state)` plus, for non-composable templates,
helpers). Composable templates render a single function and no helper, so the teacher can put
up to three of them on one hook point: each becomes a helper `rule1..rule3` and `hook` calls them
in `order` (see `compose_rules`), which stays within the static limit of three helpers.

Rendering never pastes packet text into code except through `lit` (a Python literal), and only
sanitised task-type names and fixed phrases are pasted at all: a patch must not hard-code one
task (the packet's ids are masked for the same reason).
"""

from __future__ import annotations

import ast
import io
import json
import math
import random
import re
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_r1.contracts import FailurePacket, HookName, PacketEpisode

#: Feature names a template may weigh (all in [0, 1]; see `packet_features`).
FEATURES: tuple[str, ...] = (
    "always",
    "invalid",
    "nothing",
    "repeated",
    "loops",
    "sql_errors",
    "empty_sql",
    "step_limit",
    "wrong_end",
    "modification",
    "query",
    "prose_answer",
    "invalid_click",
    "hook_faults",
    "never_clicked",  # WebShop: episodes in which no click was valid
    "never_bought",  # WebShop: episodes that opened an item and never clicked buy now
)

MODIFICATION_TYPES = ("INSERT", "UPDATE", "DELETE")
SEARCH_PLACEHOLDER = "search[<your query>]"
_ANSWER_WORDS = re.compile(r"\banswer\b|\bfinal\b", re.IGNORECASE)


# -- parameters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntParam:
    name: str
    low: int
    high: int
    default: int
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.low <= self.default <= self.high:
            raise ValueError(
                f"{self.name}: default {self.default} outside [{self.low}, {self.high}]"
            )

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1))

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    def clamp(self, value: Any) -> int:
        return max(self.low, min(self.high, int(value)))

    def describe(self) -> str:
        return f"{self.name}: int {self.low}..{self.high} (default {self.default})"


@dataclass(frozen=True)
class FloatParam:
    name: str
    low: float
    high: float
    default: float
    step: float = 0.05
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.low <= self.default <= self.high or self.step <= 0:
            raise ValueError(f"{self.name}: bad range or default")

    def values(self) -> list[float]:
        count = int(math.floor((self.high - self.low) / self.step + 1e-9))
        return [round(self.low + i * self.step, 4) for i in range(count + 1)]

    def sample(self, rng: random.Random) -> float:
        return rng.choice(self.values())

    def clamp(self, value: Any) -> float:
        value = max(self.low, min(self.high, float(value)))
        return round(self.low + round((value - self.low) / self.step) * self.step, 4)

    def describe(self) -> str:
        return (
            f"{self.name}: float {self.low}..{self.high} step {self.step} (default {self.default})"
        )


@dataclass(frozen=True)
class ChoiceParam:
    name: str
    choices: tuple[Any, ...]
    default: Any
    doc: str = ""

    def __post_init__(self) -> None:
        if self.default not in self.choices:
            raise ValueError(f"{self.name}: default {self.default!r} not among the choices")

    def values(self) -> list[Any]:
        return list(self.choices)

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.choices)

    def clamp(self, value: Any) -> Any:
        return value if value in self.choices else self.default

    def describe(self) -> str:
        shown = "|".join(str(c) for c in self.choices)
        return f"{self.name}: one of {shown} (default {self.default})"


Param = IntParam | FloatParam | ChoiceParam


# -- what templates read from a packet ----------------------------------------------------------


@dataclass(frozen=True)
class Features:
    """Packet signals as rates in [0, 1] (`values`), the raw counts behind them (`counts`, for
    the think text), and what the renderers may use (task types, constraint kinds)."""

    env: str
    values: Mapping[str, float]
    counts: Mapping[str, int]
    task_types: tuple[str, ...] = ()
    option_kinds: tuple[str, ...] = ()
    episodes: int = 0

    def __getitem__(self, name: str) -> float:
        return float(self.values.get(name, 0.0))


def _clip(value: float) -> float:
    return max(0.0, min(1.0, value))


def safe_type(name: str) -> str:
    """A task-type name fit to paste into code as a literal key: word characters, space, dash."""
    return re.sub(r"[^A-Za-z0-9 _\-]", "", name)[:60]


def _valid_click(snippet: Any) -> bool:
    return bool(snippet.action.lower().startswith("click[") and "invalid" not in snippet.flags)


#: a click on a search result: the item's ASIN, masked in packets (`click[ASIN-3]`) or raw
_ITEM_CLICK = re.compile(r"click\[(asin-\d+|b0[a-z0-9]{8})\]", re.IGNORECASE)


def _never_bought(episode: PacketEpisode) -> bool:
    """Opened an item (a valid click on a result) and never bought (no valid `click[buy now]`)
    in the packet's snippets, and failed: an agent that reaches the item page and cannot
    finish there. The snippets are the steps near the failure point: a click before them is
    not seen (the benchmark's 6-step episodes fit)."""
    opened = any(
        _ITEM_CLICK.fullmatch(s.action.strip()) and _valid_click(s) for s in episode.snippets
    )
    bought = any(
        s.action.strip().lower() == "click[buy now]" and _valid_click(s) for s in episode.snippets
    )
    return bool(opened and not bought and not episode.success)


def packet_features(packet: FailurePacket) -> Features:
    """The signal rates templates are scored on (deterministic in the packet)."""
    signals = packet.signals
    episodes = packet.episodes
    n = max(1, len(episodes))
    steps = max(1, sum(max(e.steps, len(e.snippets)) for e in episodes))
    snippets = [s for e in episodes for s in e.snippets]
    invalid_snippets = [s for s in snippets if "invalid" in s.flags]
    prose = sum(
        1
        for s in snippets
        if not s.action.lower().lstrip().startswith(("sql:", "answer:"))
        and _ANSWER_WORDS.search(s.action)
    )
    invalid_clicks = sum(1 for s in invalid_snippets if s.action.lower().startswith("click["))
    never_clicked = (
        sum(1 for e in episodes if not any(_valid_click(s) for s in e.snippets))
        if packet.env == "webshop"
        else 0
    )
    never_bought = sum(1 for e in episodes if _never_bought(e)) if packet.env == "webshop" else 0
    modifications = sum(1 for e in episodes if e.task_type in MODIFICATION_TYPES)
    wrong_end = sum(1 for e in episodes if str(e.termination) == "failure")
    counts = {
        "episodes": len(episodes),
        "steps": steps,
        "invalid": signals.invalid_actions,
        "nothing": signals.nothing_happens,
        "repeated": signals.repeated_actions,
        "loops": signals.loops,
        "sql_errors": signals.sql_errors,
        "empty_sql": signals.empty_sql_results,
        "step_limit": signals.step_limit_hits,
        "wrong_end": wrong_end,
        "modification": modifications,
        "query": len(episodes) - modifications if packet.env == "dbbench" else 0,
        "prose_answer": prose,
        "invalid_click": invalid_clicks,
        "hook_faults": signals.hook_faults,
        "never_clicked": never_clicked,
        "never_bought": never_bought,
        "always": len(episodes),
    }
    values = {
        "always": 1.0,
        "invalid": _clip(2.0 * signals.invalid_actions / steps),
        "nothing": _clip(2.0 * signals.nothing_happens / steps),
        "repeated": _clip(3.0 * signals.repeated_actions / steps),
        "loops": _clip(signals.loops / n),
        "sql_errors": _clip(signals.sql_errors / n),
        "empty_sql": _clip(signals.empty_sql_results / n),
        "step_limit": _clip(signals.step_limit_hits / n),
        "wrong_end": _clip(wrong_end / n),
        "modification": _clip(modifications / n) if episodes else 0.0,
        "query": _clip((len(episodes) - modifications) / n) if packet.env == "dbbench" else 0.0,
        "prose_answer": _clip(2.0 * prose / max(1, len(snippets))),
        "invalid_click": _clip(2.0 * invalid_clicks / max(1, len(snippets))),
        "hook_faults": _clip(signals.hook_faults / n),
        "never_clicked": _clip(never_clicked / n),
        "never_bought": _clip(never_bought / n),
    }
    types = tuple(sorted({safe_type(e.task_type) for e in episodes if safe_type(e.task_type)}))
    kinds: set[str] = set()
    for episode in episodes:
        for constraint in episode.constraints:
            if constraint.startswith("option: "):
                head = constraint[len("option: ") :].split(" ")[0]
                kinds.add(head if head in ("color", "size") else "other")
            elif constraint.startswith("price <"):
                kinds.add("price")
    return Features(
        env=packet.env,
        values=values,
        counts=counts,
        task_types=types,
        option_kinds=tuple(sorted(kinds)),
        episodes=len(episodes),
    )


# -- templates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderContext:
    """What a renderer may know besides its parameters."""

    env: str
    task_types: tuple[str, ...] = ()
    option_kinds: tuple[str, ...] = ()


Builder = Callable[[Mapping[str, Any], RenderContext], str]
Steer = Callable[[Features], Mapping[str, Any]]
Gate = Callable[[Features], float]


def _one(features: Features) -> float:
    return 1.0


#: What a template does to the model's decisions (`Template.role`).
TEMPLATE_ROLES = ("advisory", "solver")


@dataclass(frozen=True)
class Template:
    """One parameterised hook template.

    name: stable identifier (in descriptions and metadata).
    hook: the hook point it renders.
    envs: the envs it is meant for; empty = any env.
    params: typed parameters with ranges.
    build: params + context -> source; the function it defines is named `@@fn@@` (replaced by
        `hook` or by `ruleN` when composed).
    weights: feature -> weight; score = gate(features) * sum(weight * feature).
    purpose: one clause for the think text ("to ...").
    composable: renders one function and no helper (may share its hook with others).
    order: position when composed (lower runs first: forcing, then rewriting, then vetoes).
    steer: features -> parameter values that follow the packet (the greedy proposal uses
        them; sampled proposals use them half the time).
    partners: templates that complete this one (a lookup and the step that answers from its
        result); the teacher tends to take them together.
    role: "advisory" (guides, checks or repairs the model's own decisions: skills, notes,
        hints, vetoes, a rewrite of the model's own proposal into a valid command, recovery)
        or "solver" (chooses actions for the model: forces). Under the gate's advisory profile
        the teacher offers advisory templates only.
    in_menu: named in the engineer's prompt (`prompt.template_menu`). A template added after
        the committed SFT engineer was trained stays out until that engineer is retrained on
        the new prompt (`benchmarks/engineer_value --stages sft`): its rows digest pins the
        prompt it learned under. The teacher offers it either way.
    """

    name: str
    hook: HookName
    envs: frozenset[str]
    params: tuple[Param, ...]
    build: Builder
    weights: Mapping[str, float]
    purpose: str
    composable: bool = True
    order: int = 50
    gate: Gate = _one
    steer: Steer | None = None
    partners: tuple[str, ...] = ()
    role: str = ""
    in_menu: bool = True

    def __post_init__(self) -> None:
        if self.role not in TEMPLATE_ROLES:
            raise ValueError(
                f"{self.name}: role must be one of {TEMPLATE_ROLES}, got {self.role!r}"
            )
        unknown = set(self.weights) - set(FEATURES)
        if unknown:
            raise ValueError(f"{self.name}: unknown features {sorted(unknown)}")

    def applies_to(self, env: str) -> bool:
        return not self.envs or env in self.envs

    def contributions(self, features: Features) -> dict[str, float]:
        gate = self.gate(features)
        return {f: gate * w * features[f] for f, w in self.weights.items()}

    def score(self, features: Features) -> float:
        return round(sum(self.contributions(features).values()), 6)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def steered(self, features: Features) -> dict[str, Any]:
        values = self.defaults()
        if self.steer is not None:
            for name, value in self.steer(features).items():
                param = self.param(name)
                values[name] = param.clamp(value)
        return values

    def sample(self, features: Features, rng: random.Random) -> dict[str, Any]:
        """Parameters for a varied proposal: each one steered or drawn from its range."""
        steered = self.steered(features)
        return {
            p.name: steered[p.name] if rng.random() < 0.5 else p.sample(rng) for p in self.params
        }

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(f"{self.name} has no parameter {name!r}")

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults filled in, each value clamped into its range; unknown names refused."""
        unknown = set(params) - {p.name for p in self.params}
        if unknown:
            raise KeyError(f"{self.name}: unknown parameters {sorted(unknown)}")
        values = self.defaults()
        for name, value in params.items():
            values[name] = self.param(name).clamp(value)
        return values

    def render(
        self, params: Mapping[str, Any], context: RenderContext, function: str = "hook"
    ) -> str:
        source = self.build(self.check_params(params), context).replace("@@fn@@", function)
        if "@@" in source:
            raise ValueError(f"{self.name}: unfilled placeholder in the rendered source")
        return prefer_single_quotes(source.strip() + "\n")


# -- rendering helpers --------------------------------------------------------------------------


def lit(value: Any) -> str:
    """A Python literal for a str / bool / int / float / None / list / tuple / dict."""
    if isinstance(value, str):
        return json.dumps(value)  # a double-quoted literal Python reads the same way
    if value is None or isinstance(value, bool | int):
        return repr(value)
    if isinstance(value, float):
        return repr(round(value, 4))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(lit(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} as a literal")


def _requote(token: str) -> str:
    """A double-quoted (non-f) string literal in single quotes, or unchanged when it holds a
    single quote or is not such a literal."""
    prefix = token[: len(token) - len(token.lstrip("rRbBuU"))]
    body = token[len(prefix) :]
    if "f" in prefix.lower() or "'" in body:
        return token
    for quote in ('"""', '"'):
        if body.startswith(quote) and body.endswith(quote) and len(body) >= 2 * len(quote):
            inner = body[len(quote) : -len(quote)]
            single = quote.replace('"', "'")
            return prefix + single + inner + single
    return token


def prefer_single_quotes(code: str) -> str:
    """The code with its string literals in single quotes where that changes nothing.

    Why: engineers wrote code inside a JSON string, where every `"` costs an escape (`\\"`), and
    a 135M engineer garbled those escapes; the sectioned format needs none, and the committed
    cold-start rows were written this way, so it stays (a patch written as JSON still needs it).
    The result is checked to parse to the same syntax tree; if not (or the code does not
    tokenize) the code is kept.
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
        requoted = tokenize.untokenize(
            (
                t.type,
                _requote(t.string) if t.type == tokenize.STRING else t.string,
                t.start,
                t.end,
                t.line,
            )
            for t in tokens
        )
        same = ast.dump(ast.parse(requoted)) == ast.dump(ast.parse(code))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return code
    return requoted if same else code


def fill(code: str, **values: str) -> str:
    """Replace `@@name@@` placeholders by the given code snippets (`@@fn@@` is left)."""
    for name, snippet in values.items():
        code = code.replace(f"@@{name}@@", snippet)
    return code


def indent(lines: Sequence[str], spaces: int = 4) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in lines)


def compose_rules(hook: HookName, sources: Sequence[str]) -> str:
    """One hook module from up to three rule functions (already renamed rule1..ruleN).

    pre_action / post_feedback: the first rule with an effect wins (rules run in order, later
    rules only when earlier ones had nothing to say). pre_decision: the messages are joined.
    """
    if not 1 <= len(sources) <= 3:
        raise ValueError("compose_rules takes one to three rules")
    names = [f"rule{i + 1}" for i in range(len(sources))]
    if hook == HookName.PRE_DECISION:
        body = [
            "notes = []",
            f"for note in [{', '.join(f'{n}(ctx, state)' for n in names)}]:",
            "    if isinstance(note, str) and note:",
            "        notes.append(note)",
            "return ' '.join(notes) if notes else None",  # single quotes: see prefer_single_quotes
        ]
    elif hook in (HookName.PRE_ACTION, HookName.POST_FEEDBACK):
        body = []
        for name in names[:-1]:
            body += [f"out = {name}(ctx, state)", "if out:", "    return out"]
        body.append(f"return {names[-1]}(ctx, state)")
    else:
        raise ValueError(f"{hook} templates are not composed")
    head = "\n\n".join(s.strip() for s in sources)
    return head + "\n\n\ndef hook(ctx, state):\n" + indent(body) + "\n"
