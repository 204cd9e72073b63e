"""Patch intake: the one place a patch is judged fit to run, and the one wording of a refusal.

Every route a patch takes (a proposal, a hand-written file, a canary candidate, a release)
asks the same static checks and, when they refuse, reports the first violation the same way:
`code: message`, the text the engineer learns from and the canary stores as `invalid_reason`.

An engineer's text comes in through `take_in`, once: a template call rendered (by the
renderer the caller passes), else the text parsed; the hooks it may write checked (scope);
the static checks run; the result one classified candidate (`Intake`) that says where it
failed and why. Why the renderer is passed in: the template library is the engineer's
knowledge (the trainer's), and this layer may not import the trainer; what a call renders to
is checked here like any other patch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, Protocol

from harness_r1.contracts import HookName, Patch
from harness_r1.sandbox.parse import ParseResult, parse_engineer_output
from harness_r1.sandbox.static import check_patch
from harness_r1.sandbox.static_report import StaticLimits, StaticReport, Violation

#: where a candidate failed: its text ("parse"), a hook its engineer may not write ("scope"),
#: a static check ("static")
Stage = Literal["parse", "scope", "static"]
#: the reason of a template call that names templates wrongly (stage "parse")
BAD_TEMPLATE_CALL = "bad_template_call"

#: None when the patch may run, else the refusal as `code: message`.
Validator = Callable[[Patch], str | None]


def first_violation(report: StaticReport) -> Violation | None:
    """The violation a refusal is reported by (the first, in source order), None if ok."""
    return None if report.ok else report.violations[0]


def rejection(report: StaticReport) -> str | None:
    """The refusal of a static report as `code: message` (its first violation), None if ok."""
    first = first_violation(report)
    return None if first is None else f"{first.code}: {first.message}"


def check(patch: Patch, limits: StaticLimits | None = None) -> str | None:
    """The static checks of one patch, as a refusal or None."""
    return rejection(check_patch(patch, limits))


def static_validator(limits: StaticLimits | None = None) -> Validator:
    """The canary's validator under these limits (the defaults when None)."""

    def validate(patch: Patch) -> str | None:
        return check(patch, limits)

    return validate


@dataclass(frozen=True)
class RenderedCall:
    """What a template call renders to: `patch` for a call that renders, `error` for one that
    names templates wrongly (an unknown value, a template without its parameters, ...)."""

    patch: Patch | None = None
    error: str | None = None


class CallRenderer(Protocol):
    """Renders engineer text that is a template call; None when the text is no call."""

    def __call__(self, text: str, env: str, limits: StaticLimits | None) -> RenderedCall | None: ...


@dataclass(frozen=True)
class Intake:
    """One engineer text classified: `valid` when it parses (or renders) into a Patch for the
    env, writes only the hooks allowed and passes every static check; else `stage` says where
    it failed, `reason` the stable code (a ParseCode, `hook_not_allowed`, `bad_template_call`
    or the first static violation's Code) and `message` what, in words."""

    patch: Patch | None
    valid: bool
    stage: Stage | None = None
    reason: str | None = None
    message: str = ""
    codes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def take_in(
    text: str,
    env: str,
    *,
    limits: StaticLimits | None = None,
    hooks: Collection[HookName] = tuple(HookName),
    render_call: CallRenderer | None = None,
) -> Intake:
    """An engineer's text classified (see `Intake`). Never raises: no layer does, and a
    renderer that raises counts as a bad call."""
    call = _rendered(render_call, text, env, limits)
    if call is not None and call.patch is None:
        return Intake(patch=None, valid=False, stage="parse", reason=BAD_TEMPLATE_CALL,
                      message=call.error or "", codes=(BAD_TEMPLATE_CALL,))  # fmt: skip
    parsed = (
        parse_engineer_output(text, env=env)
        if call is None
        else ParseResult(patch=call.patch, notes=("template call",))
    )
    if parsed.patch is None:
        code = None if parsed.code is None else str(parsed.code)
        return Intake(patch=None, valid=False, stage="parse", reason=code,
                      message=parsed.message, codes=() if code is None else (code,),
                      notes=parsed.notes)  # fmt: skip
    return _checked(parsed.patch, parsed.notes, limits, hooks)


def _rendered(
    render_call: CallRenderer | None, text: str, env: str, limits: StaticLimits | None
) -> RenderedCall | None:
    if render_call is None:
        return None
    try:
        return render_call(text, env, limits)
    except Exception as err:  # noqa: BLE001 - intake never raises
        return RenderedCall(error=f"template call: {type(err).__name__}")


def _checked(
    patch: Patch,
    notes: tuple[str, ...],
    limits: StaticLimits | None,
    hooks: Collection[HookName],
) -> Intake:
    """Scope, then the static checks, of a patch that parsed."""
    foreign = sorted({str(h.hook) for h in patch.hooks} - {str(h) for h in hooks})
    if foreign:
        allowed = ", ".join(str(h) for h in hooks)
        message = f"writes {', '.join(foreign)}; this engineer may write only {allowed}"
        return Intake(patch=patch, valid=False, stage="scope", reason="hook_not_allowed",
                      message=message, codes=("hook_not_allowed",), notes=notes)  # fmt: skip
    report = check_patch(patch, limits)
    first = first_violation(report)
    if first is not None:
        where = f"{first.hook} line {first.line}: " if first.hook and first.line else ""
        return Intake(patch=patch, valid=False, stage="static", reason=str(first.code),
                      message=where + first.message, codes=tuple(report.codes()),
                      notes=notes)  # fmt: skip
    return Intake(patch=patch, valid=True, notes=notes)
