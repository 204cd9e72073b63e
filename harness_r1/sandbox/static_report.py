"""What the static checks are given and what they give back: their numeric limits
(`StaticLimits`), a `Violation`, per-hook `HookStats` and the `StaticReport` of a patch.

A violation names its stable code (`static_codes.py`), its message, the hook it belongs to, and
a 1-based line and column; the report says whether a patch passed and which limits it was held
to. Why a module of its own: the intake, the composition and the canary's setup pass limits and
read reports without the AST walk; the checker, which fills them, imports them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from harness_r1.sandbox.static_codes import Code

__all__ = ["HookStats", "StaticLimits", "StaticReport", "Violation"]


@dataclass(frozen=True)
class StaticLimits:
    """Numeric limits of the static checks (settings fill it; defaults follow the paper)."""

    max_source_chars: int = 8000
    max_nodes: int = 1200
    max_string_literal: int = 2000
    max_helpers: int = 3
    max_power_result: int = 10**9
    max_literal_count: int = 100_000
    max_violations_per_hook: int = 50


class Violation(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: Code
    message: str
    hook: str | None = None
    line: int | None = Field(default=None, description="1-based")
    col: int | None = Field(default=None, description="1-based")


class HookStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    chars: int
    lines: int
    nodes: int = 0
    helpers: int = 0
    longest_string: int = 0


class StaticReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    violations: list[Violation] = Field(default_factory=list)
    stats: dict[str, HookStats] = Field(default_factory=dict)
    limits: dict[str, int] = Field(default_factory=dict)
    truncated: bool = Field(default=False, description="violations were cut at the per-hook cap")

    def codes(self) -> list[str]:
        """The distinct violation codes, in first-seen order."""
        return list(dict.fromkeys(str(v.code) for v in self.violations))
