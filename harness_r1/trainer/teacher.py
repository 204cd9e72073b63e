"""Teachers for the engineer's cold start: something that writes K candidate patches for a
failure packet, in the engineer's exact output format `<think>...</think><patch>SECTIONS</patch>`.

The role is `trainer.writers.PatchWriter` (`TemplateWriter` wraps this teacher; an engineer
model is the other kind). `TemplateTeacher` is the offline teacher: a library of parameterised
hook templates (`harness_r1/trainer/templates/`), chosen and tuned from the packet's runtime
signals.

How the template teacher decides (deterministic for the packet's bytes, k and seed):
1. Features: the packet's signals as rates in [0, 1] (invalid actions per step, "Nothing
   happens." per step, SQL errors per episode, step-limit hits per episode, ...; see
   `templates.base.packet_features`). Each template's score is a weighted sum of them (gated by
   the share of task kinds it serves, e.g. modification tasks); templates for other envs and
   templates that score 0 are out.
2. Proposal 1 is greedy: the best-scoring templates (up to `max_templates`, each at least
   `min_relative_score` of the best), with parameters steered by the signals (e.g. a lower
   repeat limit when repeats are frequent).
3. Proposals 2..K are sampled: the first template among the best five with probability
   proportional to score squared, the others proportional to score; each parameter is either
   the steered value or drawn from its range. A combination already proposed is drawn again
   (up to `attempts` times), so the K proposals differ whenever the library allows it.
4. One hook per hook point: templates on the same hook are composed (`templates.base.compose_rules`)
   when all of them are composable (no helpers, at most three); otherwise the later, lower
   scoring one is not taken. Every patch is checked with the sandbox's static checks before it
   is returned; a combination that fails them is never proposed.
5. The think text names the packet's strongest signals and, per template, its hook and
   purpose (terse: see `_think`); the patch description lists the templates with their
   parameters.
6. A live overlay (the packet's `incumbent`): a template already running in it (its
   docstring found in that hook's live code) is never proposed again as an addition. When no
   other template applies, the proposals re-tune the live ones instead, each hook they touch
   given as a `replace` of the live hook.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_r1.contracts import FailurePacket, HookCode, HookMode, HookName, Patch
from harness_r1.sandbox import StaticLimits, check, render_completion
from harness_r1.trainer.templates import (
    TEMPLATES,
    Features,
    RenderContext,
    Template,
    compose_rules,
    packet_features,
    templates_for,
)

__all__ = [
    "Proposal",
    "TeacherConfig",
    "TemplateChoice",
    "TemplateTeacher",
    "choices_in",
    "library_table",
    "templates_in",
]

HOOK_ORDER: tuple[HookName, ...] = (
    HookName.EPISODE_START,
    HookName.PRE_DECISION,
    HookName.PRE_ACTION,
    HookName.POST_FEEDBACK,
)

#: How a feature is named in the think text: (one, many), {n} is its raw count in the packet.
PHRASES: dict[str, tuple[str, str]] = {
    "invalid": ("{n} invalid action", "{n} invalid actions"),
    "nothing": ('{n} "Nothing happens." answer', '{n} "Nothing happens." answers'),
    "repeated": ("{n} repeated action", "{n} repeated actions"),
    "loops": ("{n} action loop", "{n} action loops"),
    "sql_errors": ("{n} SQL error", "{n} SQL errors"),
    "empty_sql": ("{n} empty SQL result", "{n} empty SQL results"),
    "step_limit": ("{n} step-limit hit", "{n} step-limit hits"),
    "wrong_end": (
        "{n} episode ended by a wrong final action",
        "{n} episodes ended by a wrong final action",
    ),
    "modification": ("{n} INSERT/UPDATE/DELETE task", "{n} INSERT/UPDATE/DELETE tasks"),
    "query": ("{n} query task", "{n} query tasks"),
    "prose_answer": ("{n} answer written as prose", "{n} answers written as prose"),
    "invalid_click": ("{n} invalid click", "{n} invalid clicks"),
    "hook_faults": ("{n} hook fault", "{n} hook faults"),
    "never_clicked": (
        "{n} episode that never opened a product",
        "{n} episodes that never opened a product",
    ),
}
#: Signals named in the think text's first sentence, in this order of preference.
SUMMARY_SIGNALS: tuple[str, ...] = (
    "invalid",
    "nothing",
    "repeated",
    "loops",
    "sql_errors",
    "empty_sql",
    "invalid_click",
    "prose_answer",
    "step_limit",
    "wrong_end",
)


@dataclass(frozen=True)
class TemplateChoice:
    """One template with its parameter values (sorted by name, so choices compare equal)."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any] | None = None) -> TemplateChoice:
        template = TEMPLATES[name]
        checked = template.check_params(params or {})
        return cls(name, tuple(sorted(checked.items())))

    @property
    def template(self) -> Template:
        return TEMPLATES[self.name]

    def label(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.name}({inner})"


@dataclass(frozen=True)
class Proposal:
    """One candidate: the output text and what produced it."""

    text: str
    patch: Patch
    think: str
    choices: tuple[TemplateChoice, ...]
    scores: tuple[float, ...] = ()

    @property
    def templates(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.choices)


@dataclass(frozen=True)
class TeacherConfig:
    """max_templates: templates per patch (1-3). max_per_hook: composed templates on one hook.
    min_relative_score: the greedy proposal takes templates scoring at least this share of the
    best one. top_first: the sampled proposals' first template comes from the best N.
    attempts: draws per proposal before a repeated combination is accepted."""

    max_templates: int = 3
    max_per_hook: int = 3
    min_relative_score: float = 0.3
    top_first: int = 5
    attempts: int = 24
    limits: StaticLimits = field(default_factory=StaticLimits)
    # the gate's advisory profile: only templates whose role is "advisory" (no forced steps)
    advisory: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.max_templates <= 3 or not 1 <= self.max_per_hook <= 3:
            raise ValueError("max_templates and max_per_hook must be within 1..3")
        if self.attempts < 1 or self.top_first < 1:
            raise ValueError("attempts and top_first must be >= 1")


def library_table() -> list[dict[str, Any]]:
    """The template library as rows (name, hook, envs, parameters, weighted signals)."""
    return [
        {
            "name": t.name,
            "hook": str(t.hook),
            "envs": sorted(t.envs) or ["any"],
            "params": [p.describe() for p in t.params],
            "signals": dict(t.weights),
            "composable": t.composable,
            "role": t.role,
            "purpose": t.purpose,
        }
        for t in sorted(TEMPLATES.values(), key=lambda t: (str(t.hook), t.name))
    ]


def _rng(packet: FailurePacket, k: int, seed: int) -> random.Random:
    digest = hashlib.sha256(packet.to_json_bytes() + f"|{k}|{seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class TemplateTeacher:
    """The offline teacher: signal-driven choice of parameterised hook templates."""

    name = "template"

    def __init__(self, config: TeacherConfig | None = None) -> None:
        self.config = config or TeacherConfig()

    # -- public ----------------------------------------------------------------------------------

    def propose(self, packet: FailurePacket, k: int, seed: int) -> list[str]:
        return [p.text for p in self.proposals(packet, k, seed)]

    def rank(self, packet: FailurePacket, *, live: bool = False) -> list[tuple[Template, float]]:
        """The templates that apply to the packet's env with a positive score, best first:
        those not already live (rule 6), or with `live` only those that are; advisory ones
        only under the advisory profile."""
        features = packet_features(packet)
        running = live_templates(packet)
        offered = [
            t
            for t in templates_for(packet.env)
            if (t.name in running) == live and (t.role == "advisory" or not self.config.advisory)
        ]
        scored = [(t, t.score(features)) for t in offered]
        ranked = [(t, s) for t, s in scored if s > 0 or live]
        return sorted(ranked, key=lambda item: (-item[1], item[0].name))

    def proposals(self, packet: FailurePacket, k: int, seed: int) -> list[Proposal]:
        """K proposals with their metadata (see the module docstring for the rules)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        features = packet_features(packet)
        ranked = self.rank(packet)
        replace: frozenset[HookName] = frozenset()
        if not ranked and packet.incumbent:  # rule 6: re-tune what is live, hook by hook
            ranked = self.rank(packet, live=True)
            replace = frozenset(t.hook for t, _ in ranked)
        if not ranked:
            raise ValueError(f"no template applies to env {packet.env!r}")
        context = RenderContext(
            env=packet.env, task_types=features.task_types, option_kinds=features.option_kinds
        )
        rng = _rng(packet, k, seed)
        scores = {t.name: s for t, s in ranked}
        out: list[Proposal] = []
        seen: set[tuple[TemplateChoice, ...]] = set()
        for index in range(k):
            proposal: Proposal | None = None
            for attempt in range(self.config.attempts):
                greedy = index == 0 and attempt == 0
                choices = (
                    self._greedy(ranked, features)
                    if greedy
                    else self._sample(ranked, features, rng)
                )
                key = tuple(sorted(choices, key=lambda c: c.name))
                patch = self._patch(packet.env, choices, context, replace)
                if patch is None:
                    continue
                candidate = self._proposal(patch, choices, features, scores)
                if key not in seen or proposal is None:
                    proposal = candidate
                if key not in seen:
                    break
            if proposal is None:  # pragma: no cover - every template passes the static checks
                raise RuntimeError("no combination of templates passed the static checks")
            seen.add(tuple(sorted(proposal.choices, key=lambda c: c.name)))
            out.append(proposal)
        return out

    def render_patch(
        self,
        env: str,
        choices: Sequence[TemplateChoice],
        context: RenderContext | None = None,
        description: str | None = None,
        replace: frozenset[HookName] = frozenset(),
    ) -> Patch:
        """A patch from explicit template choices (composing same-hook templates); hooks in
        `replace` replace the live overlay's; raises ValueError when the result does not pass
        the static checks."""
        context = context or RenderContext(env=env)
        hooks = []
        for hook in HOOK_ORDER:
            group = [c for c in choices if c.template.hook == hook]
            if not group:
                continue
            if len(group) == 1:
                code = group[0].template.render(dict(group[0].params), context)
            else:
                if not all(c.template.composable for c in group) or len(group) > 3:
                    raise ValueError(f"{hook}: these templates cannot be composed")
                group.sort(key=lambda c: (c.template.order, c.name))
                rules = [
                    c.template.render(dict(c.params), context, function=f"rule{i + 1}")
                    for i, c in enumerate(group)
                ]
                code = compose_rules(hook, rules)
            mode = HookMode.REPLACE if hook in replace else HookMode.ADD
            hooks.append(HookCode(hook=hook, code=code, mode=mode))
        patch = Patch(
            env=env,
            description=description if description is not None else _description(choices),
            hooks=hooks,
        )
        refusal = check(patch, self.config.limits)
        if refusal is not None:
            raise ValueError(f"rendered patch fails the static checks: {refusal}")
        return patch

    # -- choosing --------------------------------------------------------------------------------

    def _fits(self, chosen: Sequence[TemplateChoice], template: Template) -> bool:
        if any(c.name == template.name for c in chosen):
            return False
        same = [c.template for c in chosen if c.template.hook == template.hook]
        if not same:
            return True
        return (
            template.composable
            and all(t.composable for t in same)
            and len(same) < self.config.max_per_hook
        )

    def _greedy(
        self, ranked: Sequence[tuple[Template, float]], features: Features
    ) -> list[TemplateChoice]:
        by_name = {t.name: t for t, _ in ranked}
        floor = self.config.min_relative_score * ranked[0][1]
        queue = [t.name for t, s in ranked if s >= floor]
        chosen: list[TemplateChoice] = []
        while queue and len(chosen) < self.config.max_templates:
            template = by_name[queue.pop(0)]
            if not self._fits(chosen, template):
                continue
            chosen.append(TemplateChoice.of(template.name, template.steered(features)))
            # a partner that scores at all comes next, even below the greedy floor
            taken = {c.name for c in chosen}
            partners = [n for n in template.partners if n in by_name and n not in taken]
            queue = partners + [n for n in queue if n not in partners]
        return chosen

    def _sample(
        self, ranked: Sequence[tuple[Template, float]], features: Features, rng: random.Random
    ) -> list[TemplateChoice]:
        size = min(rng.choices((1, 2, 3), weights=(1, 2, 2))[0], self.config.max_templates)
        top = list(ranked[: self.config.top_first])
        first = rng.choices(top, weights=[s * s for _, s in top])[0][0]
        chosen = [TemplateChoice.of(first.name, first.sample(features, rng))]
        pool = [(t, s) for t, s in ranked if t.name != first.name]
        while pool and len(chosen) < size:
            partner = next(
                (
                    i
                    for i, (t, _) in enumerate(pool)
                    if any(t.name in c.template.partners for c in chosen)
                ),
                None,
            )
            if partner is not None and rng.random() < 0.5:
                pick = partner
            else:
                pick = rng.choices(range(len(pool)), weights=[s for _, s in pool])[0]
            template = pool.pop(pick)[0]
            if self._fits(chosen, template):
                chosen.append(TemplateChoice.of(template.name, template.sample(features, rng)))
        return chosen

    def _patch(
        self,
        env: str,
        choices: Sequence[TemplateChoice],
        context: RenderContext,
        replace: frozenset[HookName] = frozenset(),
    ) -> Patch | None:
        try:
            return self.render_patch(env, choices, context, replace=replace)
        except ValueError:
            return None

    def _proposal(
        self,
        patch: Patch,
        choices: Sequence[TemplateChoice],
        features: Features,
        scores: Mapping[str, float],
    ) -> Proposal:
        think = _think(features, choices)
        return Proposal(
            text=render_completion(patch, think),
            patch=patch,
            think=think,
            choices=tuple(choices),
            scores=tuple(scores.get(c.name, 0.0) for c in choices),
        )


# -- texts ---------------------------------------------------------------------------------------


def _description(choices: Sequence[TemplateChoice]) -> str:
    names = ", ".join(c.name for c in choices)
    parts = [f"{c.label()}." for c in choices]  # the purposes are in the think text
    return f"templates: {names}. " + " ".join(parts)


def live_templates(packet: FailurePacket) -> set[str]:
    """Templates running in the packet's live overlay: those whose docstring is in the live
    code of their hook (rule 6)."""
    live = {h.hook: h.code for h in packet.incumbent}
    if not live:  # the base harness: nothing to look for
        return set()
    found = set()
    for template in templates_for(packet.env):
        code = live.get(template.hook)
        signature = _signature(template.name, packet.env)
        if code is not None and signature is not None and signature in code:
            found.add(template.name)
    return found


@functools.cache
def _signature(name: str, env: str) -> str | None:
    """The template's docstring: fixed text in every rendering, whatever the parameters."""
    template = TEMPLATES[name]
    source = template.render(template.defaults(), RenderContext(env=env))
    function = next((s for s in ast.parse(source).body if isinstance(s, ast.FunctionDef)), None)
    return None if function is None else ast.get_docstring(function, clean=False)


def templates_in(description: str) -> list[str]:
    """The template names a template-teacher description lists (empty for other texts)."""
    if not description.startswith("templates: "):
        return []
    head = description[len("templates: ") :].split(". ", 1)[0]
    return [n.strip() for n in head.split(",") if n.strip() in TEMPLATES]


#: a template choice as its `label` writes it in a description: `name(key=value, ...).`
LABEL = re.compile(r"\b(\w+)\(([^()]*)\)\.")


def choices_in(description: str) -> list[TemplateChoice]:
    """The template choices, parameters included, a template-teacher description lists: the
    inverse of its `label`s, so a deployed patch can be re-rendered with some of its templates
    (empty for a text that is not a teacher's description). Raises ValueError where a listed
    template has no label or a value does not read back as written: a silent default would
    re-render another patch."""
    labels = dict(LABEL.findall(description))
    choices = []
    for name in templates_in(description):
        if name not in labels:
            raise ValueError(f"{name} is listed without its parameters")
        choice = TemplateChoice.of(name, _params(name, labels[name]))
        if choice.label() != f"{name}({labels[name]})":
            raise ValueError(f"{name}({labels[name]}) reads back as {choice.label()}")
        choices.append(choice)
    return choices


def _params(name: str, inner: str) -> dict[str, Any]:
    """`key=value, ...` as the label wrote it (`str` of each value), each value read back by its
    parameter's own choices or literal type."""
    template = TEMPLATES[name]
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in inner.split(","))):
        key, _, text = (x.strip() for x in part.partition("="))
        values = {str(v): v for v in template.param(key).values()}
        if text not in values:
            raise ValueError(f"{name}: {key}={text} is not one of its values")
        params[key] = values[text]
    return params


def _phrase(feature: str, features: Features) -> str:
    forms = PHRASES.get(feature)
    if forms is None:
        return f"the failing {features.env} task types"
    count = features.counts.get(feature, 0)
    return forms[0 if count == 1 else 1].replace("{n}", str(count))


def _think(features: Features, choices: Sequence[TemplateChoice]) -> str:
    """Terse on purpose: the signals, then one clause per template. A 135M engineer trained on
    longer, packet-specific prose (task types, reasons, parameters) rambled on in its think
    block at sampling time and never reached the patch (seen in held-out samples)."""
    strong = [f for f in SUMMARY_SIGNALS if features.counts.get(f, 0) > 0 and features[f] > 0]
    strong.sort(key=lambda f: -features[f])
    signals = ", ".join(_phrase(f, features) for f in strong[:4]) or "no strong runtime signal"
    sentences = [f"Signals: {signals}."]
    sentences += [f"{c.name} on {c.template.hook}: {c.template.purpose}." for c in choices]
    return " ".join(sentences)
