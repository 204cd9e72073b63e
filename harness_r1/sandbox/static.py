"""Static checks of a Patch: the first (and weakest) layer of the sandbox.

An AST filter is not a security boundary (see DESIGN.md, Sandbox); it rejects the obvious, gives
the engineer model stable error codes it can learn from, and keeps the isolated worker's job
small. Everything it misses must still be contained at run time by the worker (process
isolation, rlimits, seccomp/Landlock, per-call wall budget).

The checks come in four modules: `static_codes.py` (the stable codes, their messages and the
banned names), `static_report.py` (the limits and the report), `static_checker.py` (the AST
visitor that applies the rules) and this one, the entry points: `check_source` for one hook
module and `check_patch` for every hook of a patch.

Why a module of its own: these two calls are how the intake and the composition run the
checks; they hold the order of the checks (size before parsing, parsing before the walk) and
the promise that checking never raises, and know no single rule.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import asdict

from harness_r1.contracts import HookMode, Patch
from harness_r1.sandbox.static_checker import _Checker
from harness_r1.sandbox.static_codes import Code
from harness_r1.sandbox.static_report import HookStats, StaticLimits, StaticReport, Violation

__all__ = ["check_patch", "check_source"]


def check_source(
    code: str, hook: str | None = None, limits: StaticLimits | None = None
) -> tuple[list[Violation], HookStats]:
    """Check one hook module's source. Never raises; a checker failure is a violation."""
    limits = limits or StaticLimits()
    checker = _Checker(hook, limits)
    chars = len(code)
    lines = code.count("\n") + 1
    if chars > limits.max_source_chars:
        checker.add(Code.SOURCE_TOO_LONG, line=1, col=1, n=chars, limit=limits.max_source_chars)
        return checker.violations, HookStats(chars=chars, lines=lines)
    try:
        with warnings.catch_warnings():  # invalid escapes etc.: the code is rejected or fine
            warnings.simplefilter("ignore")
            tree = ast.parse(code, mode="exec")
    except SyntaxError as err:
        # 1-based like every violation: the parser gives no position for a null byte and
        # column 0 for an over-long int literal
        checker.add(Code.SYNTAX_ERROR, line=err.lineno or 1, col=err.offset or 1, detail=err.msg)
        return checker.violations, HookStats(chars=chars, lines=lines)
    except (ValueError, RecursionError, MemoryError, OverflowError) as err:
        checker.add(Code.SYNTAX_ERROR, line=1, col=1, detail=f"{type(err).__name__}: {err}"[:200])
        return checker.violations, HookStats(chars=chars, lines=lines)
    nodes = helpers = longest = 0
    try:
        nodes = sum(1 for _ in ast.walk(tree))
        if nodes > limits.max_nodes:
            checker.add(Code.TOO_MANY_NODES, line=1, col=1, n=nodes, limit=limits.max_nodes)
        checker.module_shape(tree)
        longest = checker.walk(tree)
        defs = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(tree))
        helpers = max(defs - 1, 0)
    except Exception as err:  # noqa: BLE001 - fail closed, never raise
        checker.add(Code.UNCHECKABLE, line=1, col=1, detail=type(err).__name__)
    violations = checker.report()
    stats = HookStats(
        chars=chars, lines=lines, nodes=nodes, helpers=helpers, longest_string=longest
    )
    return violations, stats


def check_patch(patch: Patch, limits: StaticLimits | None = None) -> StaticReport:
    """Check every hook of a patch; `ok` only when no hook has a violation. Never raises."""
    limits = limits or StaticLimits()
    violations: list[Violation] = []
    stats: dict[str, HookStats] = {}
    truncated = False
    for hook_code in patch.hooks:
        if hook_code.mode == HookMode.REMOVE:  # no code: what it removes is composition's
            continue
        name = str(hook_code.hook)
        found, hook_stats = check_source(hook_code.code, name, limits)
        if len(found) > limits.max_violations_per_hook:
            found, truncated = found[: limits.max_violations_per_hook], True
        violations.extend(found)
        stats[name] = hook_stats
    return StaticReport(
        ok=not violations,
        violations=violations,
        stats=stats,
        limits=asdict(limits),
        truncated=truncated,
    )
