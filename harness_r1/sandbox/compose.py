"""Fold an overlay chain (the incumbent's links plus a new one) into one composed Patch.

Why composed source, not a runtime that calls several patches: the composed Patch is what the
canary measures and what gets signed and released, so an agent runs exactly what was judged
and needs no composition logic of its own that could drift from the canary's. The composed
code is ordinary hook code: it passes the same static checks, runs in the same worker, and
its budgets (source size, AST nodes, the per-call wall time) apply to the whole composition,
which is what bounds a chain's length (`squash` in the registry folds a proven chain).

Resolution, link by link, oldest first, per hook name: `add` appends the link's hook after
those already there, `replace` drops them and keeps the link's, `remove` drops them (a remove
or replace of a hook nobody has is refused: the engineer meant something that is not there).
A hook with one contributor keeps its source byte for byte; with several, each contributor's
source is wrapped in a factory (`def link2_ab12cd34(): <source> return hook`) and a generated
`hook` calls them in chain order and merges what they return:

- episode_start: skills join in chain order, identical ones once; over the runtime's limits
  (8 skills, 8,000 chars) the newest are kept. State never conflicts: each link keeps its own
  state under its factory's name and sees only that part, in every hook.
- pre_decision: notes join in chain order, one per line, cut at the runtime's 4,000 chars.
- pre_action: each link sees the action as the links before it left it (a rewrite or force
  replaces `ctx["proposed_action"]` for the next link); the newest link that returns an
  effect decides the kind (so a newer veto or force wins over an older rewrite, and a newer
  force over an older veto); None or allow from a newer link changes nothing.
- post_feedback: hints join in chain order; a force or recover from a link wins over every
  older one and over hints; a winning recover carries the hints after its own text, a force
  drops them (a forced next action has no text for the model).

A link whose call fails (raises, or returns something that is not an effect of its hook) makes
the composed call fail the same way: no effect that step and one fault recorded, so the canary
sees a broken link instead of a composition that quietly runs without it.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness_r1.contracts import HookCode, HookMode, HookName, Patch
from harness_r1.harness.effects import MAX_EFFECT_TEXT, MAX_SKILLS, MAX_SKILLS_CHARS
from harness_r1.sandbox.static import StaticLimits, StaticReport, check_patch, check_source


class CompositionRefused(ValueError):
    """The chain cannot be composed; `code` is stable, the message says what to do instead."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Link:
    """One link of a chain: an overlay's own patch (what its engineer wrote) and its id."""

    overlay_id: str
    patch: Patch


@dataclass(frozen=True)
class Composition:
    """The composed overlay and which links run in each of its hooks, in call order."""

    patch: Patch
    contributors: dict[HookName, tuple[str, ...]] = field(default_factory=dict)
    report: StaticReport | None = None

    def describe(self) -> dict[str, list[str]]:
        return {str(hook): list(ids) for hook, ids in self.contributors.items()}


def compose(
    links: Sequence[Link], limits: StaticLimits | None = None, description: str | None = None
) -> Composition:
    """The chain folded into one runnable Patch, or CompositionRefused. Deterministic."""
    if not links:
        raise CompositionRefused("empty_chain", "nothing to compose")
    env = links[-1].patch.env
    mismatched = [link.overlay_id for link in links if link.patch.env != env]
    if mismatched:
        raise CompositionRefused(
            "env_mismatch", f"links {', '.join(mismatched)} are not for env {env!r}"
        )
    chains = _resolve(links)
    hooks: list[HookCode] = []
    contributors: dict[HookName, tuple[str, ...]] = {}
    for hook in HookName:
        chain = chains.get(hook, [])
        if not chain:
            continue
        contributors[hook] = tuple(f"{position}:{oid}" for position, oid, _ in chain)
        code = chain[0][2] if len(chain) == 1 else _composed_source(hook, chain)
        hooks.append(HookCode(hook=hook, code=code))
    if not hooks:
        raise CompositionRefused(
            "removes_everything",
            "the chain removes every hook: that is the base harness; roll back to base instead",
        )
    patch = Patch(
        env=env,
        description=description if description is not None else links[-1].patch.description,
        hooks=hooks,
    )
    limits = limits or StaticLimits()
    _check_links(chains, limits)
    report = _check(patch, contributors, limits)
    return Composition(patch=patch, contributors=contributors, report=report)


def _resolve(links: Sequence[Link]) -> dict[HookName, list[tuple[int, str, str]]]:
    """Per hook: (link position, overlay id, source) of the links that run, in chain order."""
    chains: dict[HookName, list[tuple[int, str, str]]] = {}
    for position, link in enumerate(links, start=1):
        for entry in link.patch.hooks:
            current = chains.setdefault(entry.hook, [])
            if entry.mode != HookMode.ADD and not current:
                raise CompositionRefused(
                    f"nothing_to_{entry.mode}",
                    f"{entry.hook}: '{entry.mode}' needs an incumbent {entry.hook} hook and "
                    f"there is none; use 'add'",
                )
            if entry.mode != HookMode.ADD:
                current.clear()
            if entry.mode != HookMode.REMOVE:
                current.append((position, link.overlay_id, entry.code))
    return chains


def _check_links(chains: dict[HookName, list[tuple[int, str, str]]], limits: StaticLimits) -> None:
    """Every link's hook within the ordinary limits on its own: composing widens the helper
    allowance of the whole, never what one link may bring."""
    for hook, chain in chains.items():
        for position, overlay_id, code in chain:
            violations, _ = check_source(code, str(hook), limits)
            if violations:
                first = violations[0]
                raise CompositionRefused(
                    "link_invalid",
                    f"link {position} ({overlay_id}) {hook}: {first.code}: {first.message}",
                )


def _check(
    patch: Patch, contributors: dict[HookName, tuple[str, ...]], limits: StaticLimits
) -> StaticReport:
    """The composed overlay under the ordinary static checks, as every agent will check it:
    size and AST nodes are the whole composition's; helpers are counted per link."""
    report = check_patch(patch, limits)
    if not report.ok:
        first = report.violations[0]
        links = ", ".join(contributors[HookName(str(first.hook))])
        raise CompositionRefused(
            "over_budget" if first.code in _BUDGET_CODES else "composed_invalid",
            f"the composed {first.hook} hook ({links}) "
            f"fails the static checks: {first.code}: {first.message}. Make the new link "
            f"smaller, replace an incumbent hook instead of adding to it, or squash the chain",
        )
    return report


_BUDGET_CODES = {"source_too_long", "too_many_nodes", "too_many_helpers"}


def factory_name(position: int, overlay_id: str) -> str:
    """A link's factory and state key: position and id keep it unique and readable."""
    tail = "".join(ch for ch in overlay_id.lower() if ch.isalnum())[-8:] or "x"
    return f"link{position}_{tail}"


def _composed_source(hook: HookName, chain: list[tuple[int, str, str]]) -> str:
    factories = []
    names = []
    for position, overlay_id, code in chain:
        name = factory_name(position, overlay_id)
        names.append(name)
        factories.append(_factory(name, code))
    links = "".join(f'("{name}", {name}), ' for name in names)
    merge = (
        _MERGE[hook]
        .replace("LINKS", f"({links})")
        .replace("MAX_SKILLS_CHARS", str(MAX_SKILLS_CHARS))
        .replace("MAX_SKILLS", str(MAX_SKILLS))
        .replace("MAX_EFFECT_TEXT", str(MAX_EFFECT_TEXT))
    )
    return "\n\n".join([*factories, _EFFECT_TEXT, merge])


def _factory(name: str, code: str) -> str:
    """`def NAME(): <the link's module body> return hook`, through the AST: indenting the text
    would change multi-line string literals. Comments are lost; `overlay show` prints each
    link's own source."""
    factory = ast.parse(f"def {name}():\n    return hook\n").body[0]
    assert isinstance(factory, ast.FunctionDef)
    factory.body[:0] = ast.parse(code).body
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[])))


_EFFECT_TEXT = """def effect_text(value):
    for key in ("text", "action", "message", "hint"):
        if key in value:
            return value[key]
    return None
"""

_MERGE: dict[HookName, str] = {
    HookName.EPISODE_START: """def hook(ctx, state):
    skills = []
    merged = {}
    for key, make in LINKS:
        own = {}
        value = make()(ctx, own)
        if isinstance(value, str):
            value = {"skills": [value]}
        if value is None:
            value = {}
        if not isinstance(value, dict) or set(value) - {"skills", "state"}:
            return value
        more = value.get("skills", [])
        if isinstance(more, str):
            more = [more]
        if not isinstance(more, list):
            return value
        skills += [s for s in more if s not in skills]
        merged[key] = value.get("state", own)
    skills = skills[-MAX_SKILLS:]
    total = sum(len(s) for s in skills if isinstance(s, str))
    for s in list(skills):
        if total <= MAX_SKILLS_CHARS:
            break
        skills.remove(s)
        total -= len(s) if isinstance(s, str) else 0
    return {"skills": skills, "state": merged}
""",
    HookName.PRE_DECISION: """def hook(ctx, state):
    notes = []
    for key, make in LINKS:
        value = make()(ctx, state.setdefault(key, {}))
        if isinstance(value, dict) and value.get("effect", "message") == "message":
            value = effect_text(value)
        if value is None:
            continue
        if not isinstance(value, str):
            return value
        notes.append(value)
    if not notes:
        return None
    return "\\n".join(notes)[:MAX_EFFECT_TEXT]
""",
    HookName.PRE_ACTION: """def hook(ctx, state):
    seen = dict(ctx)
    decided = None
    for key, make in LINKS:
        value = make()(seen, state.setdefault(key, {}))
        if value is None:
            continue
        if not isinstance(value, dict):
            return value
        kind = value.get("effect")
        if kind not in ("allow", "rewrite", "veto", "force"):
            return value
        if kind == "allow":
            continue
        text = effect_text(value)
        if kind != "veto" and isinstance(text, str) and text.strip():
            seen = dict(seen, proposed_action=text)
        decided = value
    return decided
""",
    HookName.POST_FEEDBACK: """def hook(ctx, state):
    hints = []
    decided = None
    for key, make in LINKS:
        value = make()(ctx, state.setdefault(key, {}))
        if value is None:
            continue
        if isinstance(value, str):
            hints.append(value)
            continue
        if not isinstance(value, dict):
            return value
        kind = value.get("effect")
        text = effect_text(value)
        if kind == "hint" and isinstance(text, str):
            hints.append(text)
        elif kind in ("force", "recover") and isinstance(text, str):
            decided = {"effect": kind, "text": text}
        else:
            return value
    if decided is not None and decided["effect"] == "recover" and hints:
        text = "\\n".join([decided["text"], *hints])[:MAX_EFFECT_TEXT]
        return {"effect": "recover", "text": text}
    if decided is not None:
        return decided
    if not hints:
        return None
    return "\\n".join(hints)[:MAX_EFFECT_TEXT]
""",
}
