"""Parse what a hook returned into one allowed effect, or say why it is junk.

A hook returns a plain JSON-able value. Accepted shapes:
- None                              -> no effect (for pre_action: allow)
- a str                             -> pre_decision: message; post_feedback: hint;
                                       episode_start: skills
- {"effect": KIND, "text": str}     -> KIND of the hook's allowed effects
  (aliases: "action" / "message" / "hint" may be used as the text key)
- episode_start: {"skills": str | [str], "state": {..}} (either or both; at most MAX_SKILLS
  skills of MAX_SKILLS_CHARS in all)
Anything else (wrong types, effects the hook may not request, oversized text) is junk: the
call has no effect and the step records a fault. Why so strict: hooks are written by a model
and the runtime must stay predictable whatever comes back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness_r1.contracts import ALLOWED_EFFECTS, EffectKind, HookName

MAX_EFFECT_TEXT = 4000
MAX_STATE_BYTES = 64_000
MAX_SKILLS = 8
MAX_SKILLS_CHARS = 8000
_TEXT_KEYS = ("text", "action", "message", "hint")


class JunkResult(ValueError):
    """The hook's return value is not an allowed effect; the message says why."""


@dataclass(frozen=True)
class Effect:
    kind: EffectKind
    text: str = ""


@dataclass(frozen=True)
class StartEffects:
    skills: tuple[str, ...] = ()
    state: dict[str, Any] | None = None


#: Chat-template control markers: effect text must not forge turns in the model's prompt.
CONTROL_MARKERS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<start_of_turn>",
    "<end_of_turn>",
)


def printable(text: str, limit: int = 500) -> str:
    """A fault detail safe to record: cut, and any text that is not valid Unicode replaced."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise JunkResult(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_EFFECT_TEXT:
        raise JunkResult(f"{what} is {len(value)} chars; the limit is {MAX_EFFECT_TEXT}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:  # lone surrogates: the trajectory could not be published
        raise JunkResult(f"{what} is not valid Unicode text: {err.reason}") from err
    marker = next((m for m in CONTROL_MARKERS if m in value), None)
    if marker is not None:
        raise JunkResult(f"{what} contains the chat-template marker {marker}")
    return value


def check_state(state: Any) -> dict[str, Any]:
    """The shared per-episode state must stay a small JSON object."""
    if not isinstance(state, dict):
        raise JunkResult(f"state must be a dict, got {type(state).__name__}")
    try:
        size = len(json.dumps(state, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise JunkResult(f"state is not JSON-able: {err}") from err
    if size > MAX_STATE_BYTES:
        raise JunkResult(f"state is {size} bytes as JSON; the limit is {MAX_STATE_BYTES}")
    return state


def parse_step_effect(hook: HookName, value: Any) -> Effect | None:
    """Effect of a pre_decision / pre_action / post_feedback call, None for no effect."""
    if value is None:
        return None
    allowed = ALLOWED_EFFECTS[hook]
    if isinstance(value, str):
        default = {
            HookName.PRE_DECISION: EffectKind.MESSAGE,
            HookName.POST_FEEDBACK: EffectKind.HINT,
        }
        if hook not in default:
            raise JunkResult(f"{hook} must return a dict like {{'effect': 'rewrite', 'text': ...}}")
        return Effect(default[hook], _text(value, "message"))
    if not isinstance(value, dict):
        raise JunkResult(f"{hook} returned {type(value).__name__}; expected None, str or dict")
    raw_kind = value.get("effect", EffectKind.MESSAGE if hook == HookName.PRE_DECISION else None)
    try:
        kind = EffectKind(str(raw_kind))
    except ValueError as err:
        raise JunkResult(f"unknown effect {raw_kind!r}") from err
    if kind not in allowed:
        names = ", ".join(sorted(str(k) for k in allowed))
        raise JunkResult(f"{hook} may not request {kind}; allowed: {names}")
    if kind == EffectKind.ALLOW:
        return Effect(kind)
    text_key = next((k for k in _TEXT_KEYS if k in value), None)
    if text_key is None:
        raise JunkResult(f"effect {kind} needs a 'text' (or 'action'/'message'/'hint') field")
    text = _text(value[text_key], text_key)
    if kind in (EffectKind.REWRITE, EffectKind.FORCE) and not text.strip():
        raise JunkResult(f"effect {kind} needs a non-empty action")
    return Effect(kind, text)


def parse_start_effects(value: Any) -> StartEffects:
    if value is None:
        return StartEffects()
    if isinstance(value, str):
        return StartEffects(skills=(_text(value, "skills"),))
    if not isinstance(value, dict):
        raise JunkResult(
            f"episode_start returned {type(value).__name__}; expected None, str or dict"
        )
    unknown = set(value) - {"skills", "state"}
    if unknown:
        raise JunkResult(f"episode_start returned unknown keys: {', '.join(sorted(unknown))}")
    skills_value = value.get("skills", [])
    skills_list = [skills_value] if isinstance(skills_value, str) else skills_value
    if not isinstance(skills_list, list):
        raise JunkResult("skills must be a string or a list of strings")
    if len(skills_list) > MAX_SKILLS:
        raise JunkResult(f"{len(skills_list)} skills; the limit is {MAX_SKILLS}")
    skills = tuple(_text(s, "skill") for s in skills_list)
    if sum(len(s) for s in skills) > MAX_SKILLS_CHARS:
        raise JunkResult(f"skills total over {MAX_SKILLS_CHARS} chars")
    state = check_state(value["state"]) if "state" in value else None
    return StartEffects(skills=skills, state=state)
