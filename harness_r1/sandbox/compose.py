"""Fold an overlay chain (the incumbent's links plus a new one) into one composed Patch.

Why composed source, not a runtime that calls several patches: the composed Patch is what the
canary measures and what gets signed and released, so an agent runs exactly what was judged
and needs no composition logic of its own that could drift from the canary's. The composed
code is ordinary hook code: it passes the same static checks, runs in the same worker, and
its budgets (source size, AST nodes, the per-call wall time) apply to the whole composition,
which is what bounds a chain's length.

Resolution, link by link, oldest first, per hook name: `add` appends the link's hook after
those already there, `replace` drops them and keeps the link's, `remove` drops them (a remove
or replace of a hook nobody has is refused: the engineer meant something that is not there).
A chain of one link is that link's patch, byte for byte. In a longer chain every hook is
composed, even one with a single contributor (so every link's state is kept the same way):
each contributor's module is wrapped in a factory named by its position (`def link2(): <its
defs> return hook`, through the AST) and a generated `hook` calls them in chain order, each
with its own deep copy of `ctx`, and merges what they return:

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

A link whose call fails (raises, or returns something its hook may not return alone: checked
link by link as `harness/effects.py` checks a hook's value) makes the composed call fail with
that value: no effect that step and one fault recorded, so the canary sees a broken link
instead of a composition that quietly runs without it. Names `linkN` are the scaffolding's: a
link may not define them.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness_r1.contracts import HookCode, HookMode, HookName, Patch
from harness_r1.harness import CONTROL_MARKERS, MAX_EFFECT_TEXT, MAX_SKILLS, MAX_SKILLS_CHARS
from harness_r1.sandbox.static import check_patch, check_source
from harness_r1.sandbox.static_checker import LINK_FACTORY
from harness_r1.sandbox.static_report import StaticLimits, StaticReport


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
    """The composed overlay and which links run in each of its hooks (1-based positions in
    the chain), in call order."""

    patch: Patch
    contributors: dict[HookName, tuple[int, ...]] = field(default_factory=dict)
    report: StaticReport | None = None

    def describe(self) -> dict[str, list[int]]:
        return {str(hook): list(positions) for hook, positions in self.contributors.items()}


def compose_chain(
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
    limits = limits or StaticLimits()
    _check_links(chains, limits)
    hooks: list[HookCode] = []
    contributors: dict[HookName, tuple[int, ...]] = {}
    for hook in HookName:
        chain = chains.get(hook, [])
        if not chain:
            continue
        contributors[hook] = tuple(position for position, _, _ in chain)
        code = chain[0][2] if len(links) == 1 else _composed_source(hook, chain)
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
    names = {position: f"{position}:{link.overlay_id}" for position, link in enumerate(links, 1)}
    report = _check(patch, {h: [names[p] for p in ps] for h, ps in contributors.items()}, limits)
    return Composition(patch=patch, contributors=contributors, report=report)


def effective_sources(links: Sequence[Link]) -> dict[HookName, list[str]]:
    """Per hook, the sources of the links that run in it, oldest first (what an engineer is
    shown of the incumbent: each link as written, without the composition's scaffolding)."""
    if not links:
        return {}
    return {hook: [code for _, _, code in chain] for hook, chain in _resolve(links).items()}


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
    """Every link's hook within the ordinary limits on its own, and free of the scaffolding's
    names: composing never widens what one link may bring."""
    for hook, chain in chains.items():
        for position, overlay_id, code in chain:
            violations, _ = check_source(code, str(hook), limits)
            if violations:
                first = violations[0]
                raise CompositionRefused(
                    "link_invalid",
                    f"link {position} ({overlay_id}) {hook}: {first.code}: {first.message}",
                )
            reserved = sorted(_top_level_names(code) & _RESERVED | _factory_like(code))
            if reserved:
                raise CompositionRefused(
                    "link_invalid",
                    f"link {position} ({overlay_id}) {hook}: {', '.join(reserved)} is a name the "
                    "composition uses; rename it",
                )


_RESERVED = frozenset({"clone", "good_text", "effect_text"})


def _top_level_names(code: str) -> set[str]:
    return {s.name for s in ast.parse(code).body if isinstance(s, ast.FunctionDef)}


def _factory_like(code: str) -> set[str]:
    return {name for name in _top_level_names(code) if LINK_FACTORY.fullmatch(name)}


def _check(
    patch: Patch, contributors: dict[HookName, list[str]], limits: StaticLimits
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
            f"smaller, or replace an incumbent hook instead of adding to it",
        )
    return report


_BUDGET_CODES = {"source_too_long", "too_many_nodes", "too_many_helpers"}


def factory_name(position: int) -> str:
    """A link's factory and state key: its position in the chain (stable as the chain grows,
    so the stored composition and a recomposition of the same chain are the same bytes)."""
    return f"link{position}"


def _composed_source(hook: HookName, chain: list[tuple[int, str, str]]) -> str:
    names = [factory_name(position) for position, _, _ in chain]
    factories = [_factory(factory_name(position), code) for position, _, code in chain]
    links = "".join(f'("{name}", {name}), ' for name in names)
    merge = (
        _MERGE[hook]
        .replace("LINKS", f"({links})")
        .replace("MAX_SKILLS_CHARS", str(MAX_SKILLS_CHARS))
        .replace("MAX_SKILLS", str(MAX_SKILLS))
        .replace("MAX_EFFECT_TEXT", str(MAX_EFFECT_TEXT))
    )
    scaffold = _SCAFFOLD.replace("MARKERS", repr(CONTROL_MARKERS)).replace(
        "MAX_EFFECT_TEXT", str(MAX_EFFECT_TEXT)
    )
    return "\n\n".join([*factories, scaffold, merge])


def _factory(name: str, code: str) -> str:
    """`def NAME(): <the link's module body> return hook`, through the AST: indenting the text
    would change multi-line string literals. Comments are lost; `overlay show` prints each
    link's own source."""
    try:
        factory = ast.parse(f"def {name}():\n    return hook\n").body[0]
        assert isinstance(factory, ast.FunctionDef)
        factory.body[:0] = ast.parse(code).body
        return ast.unparse(ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[])))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise CompositionRefused(
            "link_invalid", f"{name} cannot be wrapped: {type(err).__name__}"
        ) from err


_SCAFFOLD = """def clone(value):
    if isinstance(value, dict):
        return {key: clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone(item) for item in value]
    return value


def good_text(value):
    if not isinstance(value, str) or len(value) > MAX_EFFECT_TEXT:
        return False
    return not any(marker in value for marker in MARKERS)


def effect_text(value):
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
        value = make()(clone(ctx), own)
        if value is None:
            value = {}
        if isinstance(value, str):
            value = {"skills": [value]}
        if not isinstance(value, dict) or set(value) - {"skills", "state"}:
            return value
        more = value.get("skills", [])
        if isinstance(more, str):
            more = [more]
        if not isinstance(more, list) or len(more) > MAX_SKILLS:
            return value
        if not all(good_text(s) for s in more) or sum(len(s) for s in more) > MAX_SKILLS_CHARS:
            return value
        skills += [s for s in more if s not in skills]
        part = value.get("state", own)
        if not isinstance(part, dict):
            return value
        if part:
            merged[key] = part
    skills = skills[-MAX_SKILLS:]
    total = sum(len(s) for s in skills)
    for s in list(skills):
        if total <= MAX_SKILLS_CHARS:
            break
        skills.remove(s)
        total -= len(s)
    if merged:
        return {"skills": skills, "state": merged}
    return {"skills": skills}
""",
    HookName.PRE_DECISION: """def hook(ctx, state):
    notes = []
    for key, make in LINKS:
        value = make()(clone(ctx), state.setdefault(key, {}))
        if value is None:
            continue
        text = value
        if isinstance(value, dict):
            if value.get("effect", "message") != "message":
                return value
            text = effect_text(value)
        if not good_text(text):
            return value
        notes.append(text)
    if not notes:
        return None
    return "\\n".join(notes)[:MAX_EFFECT_TEXT]
""",
    HookName.PRE_ACTION: """def hook(ctx, state):
    seen = clone(ctx)
    decided = None
    for key, make in LINKS:
        value = make()(clone(seen), state.setdefault(key, {}))
        if value is None:
            continue
        if not isinstance(value, dict):
            return value
        kind = value.get("effect")
        if kind == "allow":
            continue
        text = effect_text(value)
        if kind not in ("rewrite", "veto", "force") or not good_text(text):
            return value
        if kind != "veto" and not text.strip():
            return value
        if kind != "veto":
            seen["proposed_action"] = text
        decided = value
    return decided
""",
    HookName.POST_FEEDBACK: """def hook(ctx, state):
    hints = []
    decided = None
    for key, make in LINKS:
        value = make()(clone(ctx), state.setdefault(key, {}))
        if value is None:
            continue
        kind = "hint"
        text = value
        if isinstance(value, dict):
            kind = value.get("effect")
            text = effect_text(value)
        if kind not in ("hint", "force", "recover") or not good_text(text):
            return value
        if kind == "force" and not text.strip():
            return value
        if kind == "hint":
            hints.append(text)
        else:
            decided = {"effect": kind, "text": text}
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
