"""Patch intake: the one place a patch is judged fit to run, and the one wording of a refusal.

Every route a patch takes (a proposal, a hand-written file, a canary candidate, a release)
asks the same static checks and, when they refuse, reports the first violation the same way:
`code: message`, the text the engineer learns from and the canary stores as `invalid_reason`.
"""

from __future__ import annotations

from collections.abc import Callable

from harness_r1.contracts import Patch
from harness_r1.sandbox.static import StaticLimits, StaticReport, Violation, check_patch

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
