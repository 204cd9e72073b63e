"""The static checker's AST visitor: one walk over a hook module that applies every rule and
records each violation at its line and column.

Decisions on borderline syntax: generator expressions are allowed (`any(a in s for a in xs)` is
everyday code; the frame walk through `gi_frame` is blocked by the attribute rule), `assert` is
allowed (it raises AssertionError, which no hook can catch, so it only means "no effect"), `del`
of names and subscripts is allowed, f-strings (with `!r`, `!s`, nested format specs) are
allowed (they cannot read attributes by a string name, unlike str.format), `match` is allowed.
`isinstance` is a builtin; `type`, `id`, `bytearray`, `memoryview`, `iter` and `print` are not.

Why a module of its own: one AST visitor whose rules share its walk and state (hook, nesting,
folded literals); split by rule, each part would need the whole visitor. What it applies is
stated in `static_codes.py`; how a hook's source reaches it (size first, then parsing, failing
closed) is `static.py`'s.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from harness_r1.sandbox.hooklib import (
    ALLOWED_BUILTINS,
    CATCHABLE_EXCEPTIONS,
    MATH_EXPORTS,
    RE_EXPORTS,
    SCOPE_NAMES,
)
from harness_r1.sandbox.static_codes import (
    _INTERNALS_HINT,
    BANNED_ATTRIBUTE_PREFIXES,
    BANNED_ATTRIBUTES,
    BANNED_MODULES,
    BANNED_NAMES,
    MESSAGES,
    Code,
)
from harness_r1.sandbox.static_report import StaticLimits, Violation

_MODULE_EXPORTS: dict[str, frozenset[str]] = {
    "re": frozenset(RE_EXPORTS),
    "math": frozenset(MATH_EXPORTS),
}
_NAMED_BINDERS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ExceptHandler,
    ast.MatchAs,
    ast.MatchStar,
)
_KNOWN_GLOBALS = frozenset(ALLOWED_BUILTINS) | frozenset(SCOPE_NAMES)
_CATCHABLE = frozenset(CATCHABLE_EXCEPTIONS)


def _short(node: ast.AST, limit: int = 40) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(node: ast.AST) -> tuple[int | None, int | None]:
    """1-based line and column; for `x.attr`, the column of `attr` itself."""
    if isinstance(node, ast.Attribute):
        end_line, end_col = node.end_lineno, node.end_col_offset
        if isinstance(end_line, int) and isinstance(end_col, int) and end_col >= len(node.attr):
            return end_line, end_col - len(node.attr) + 1
    line = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    return line, (col + 1 if isinstance(col, int) else None)


class _Checker:
    def __init__(self, hook: str | None, limits: StaticLimits) -> None:
        self.hook = hook
        self.limits = limits
        self.violations: list[Violation] = []

    def add(
        self,
        code: Code,
        node: ast.AST | None = None,
        *,
        line: int | None = None,
        col: int | None = None,
        **fields: Any,
    ) -> None:
        message = MESSAGES[code].format(**fields)
        if node is not None:
            line, col = _where(node)
        self.violations.append(
            Violation(code=code, message=message, hook=self.hook, line=line, col=col)
        )

    def report(self) -> list[Violation]:
        """The violations by position; the same problem twice on one line is reported once, at
        its first column (the walk is breadth-first, so the order found is not the order read)."""
        seen: set[tuple[Code, str, int | None]] = set()
        unique: list[Violation] = []
        for violation in sorted(self.violations, key=lambda v: (v.line or 0, v.col or 0)):
            key = (violation.code, violation.message, violation.line)
            if key not in seen:
                seen.add(key)
                unique.append(violation)
        return unique

    # -- structure -------------------------------------------------------------------------

    def module_shape(self, tree: ast.Module) -> None:
        hooks: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        for index, stmt in enumerate(tree.body):
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                if stmt.name == "hook":
                    hooks.append(stmt)
                continue
            docstring = (
                index == 0
                and isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            )
            if not docstring:
                self.add(Code.TOP_LEVEL_STATEMENT, stmt, kind=type(stmt).__name__.lower())
        if not hooks:
            self.add(Code.MISSING_HOOK, line=1, col=1)
        for extra in hooks[1:]:
            self.add(Code.DUPLICATE_HOOK, extra)
        for hook_def in hooks:
            args = hook_def.args
            positional = len(args.posonlyargs) + len(args.args)
            if (
                positional != 2
                or args.defaults
                or args.kwonlyargs
                or args.vararg is not None
                or args.kwarg is not None
            ):
                self.add(Code.BAD_SIGNATURE, hook_def)
        factories = [s for s in tree.body if _is_link_factory(s)]
        defs = _count_defs(tree) - sum(_count_defs(f) for f in factories)
        helpers = defs - min(len(hooks), 1)
        if helpers > self.limits.max_helpers:
            self.add(Code.TOO_MANY_HELPERS, line=1, col=1, n=helpers, limit=self.limits.max_helpers)
        for factory in factories:  # a composed hook: each link keeps its own allowance
            inner = _count_defs(factory) - 2  # the factory and the link's own `hook`
            if inner > self.limits.max_helpers:
                self.add(Code.TOO_MANY_HELPERS, factory, n=inner, limit=self.limits.max_helpers)

    # -- names -----------------------------------------------------------------------------

    def name(self, name: str, node: ast.AST) -> bool:
        """Check a name in any position; True if it is banned or private."""
        if name in BANNED_NAMES:
            self.add(Code.BANNED_NAME, node, name=name, hint=BANNED_NAMES[name])
            return True
        if name in BANNED_MODULES:
            self.add(Code.BANNED_MODULE, node, name=name)
            return True
        if name.startswith("_") and name != "_":
            self.add(Code.PRIVATE_NAME, node, name=name)
            return True
        return False

    def attribute(self, attr: str, node: ast.AST) -> None:
        if attr.startswith("_"):
            self.add(Code.PRIVATE_ATTRIBUTE, node, name=attr)
        elif attr in BANNED_ATTRIBUTES:
            self.add(Code.BANNED_ATTRIBUTE, node, name=attr, hint=BANNED_ATTRIBUTES[attr])
        elif attr.startswith(BANNED_ATTRIBUTE_PREFIXES):
            self.add(Code.BANNED_ATTRIBUTE, node, name=attr, hint=_INTERNALS_HINT)

    # -- literals --------------------------------------------------------------------------

    def literal_int(self, node: ast.AST, depth: int = 0) -> int | None:
        """The value of an int-literal expression (folding -, +, ** and *), if small enough."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = self.literal_int(node.operand, depth + 1)
            if value is None:
                return None
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow | ast.Mult):
            left = self.literal_int(node.left, depth + 1)
            right = self.literal_int(node.right, depth + 1)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Mult):
                if left.bit_length() + right.bit_length() > 256:
                    return None
                return left * right
            if right < 0 or right > 256 or abs(left).bit_length() * right > 256:
                return None
            return int(left**right)
        return None

    def power_bomb(self, node: ast.BinOp) -> None:
        if not self._numeric_literal(node.right):
            # `2 ** n`: one C-level big-int power, as costly as the factorial that is left out
            # of `math`, and no wall budget interrupts it
            self.add(Code.COMPUTED_EXPONENT, node, exponent=_short(node.right))
            return
        base = self.literal_int(node.left)
        exponent = self.literal_int(node.right)
        if base is None or exponent is None:
            # too deep or too large to fold (`9 ** +++++++++999999999`): too large for a hook,
            # as for repetitions and ranges; a computed base with a literal exponent is bounded
            # by the base's own size
            too_big = self._is_int_expr(node)
        elif exponent <= 0 or abs(base) <= 1:
            return
        else:
            digits = exponent * math.log10(abs(base))
            limit = self.limits.max_power_result
            # at the limit counts (10 ** 9 with the default 10 ** 9): exact when it is small
            too_big = digits > math.log10(limit) + 1 or abs(base) ** exponent >= limit
        if too_big:
            self.add(
                Code.LITERAL_BOMB,
                node,
                what="this literal power",
                limit=f"{self.limits.max_power_result:,}",
            )

    def copies(self, node: ast.AST, depth: int = 0) -> int | None:
        """How many copies of a sequence literal `node` builds (`'ab'` 1, `[0] * 3 * 4` 12;
        over the limit when a count is too large to fold); None if it is no such repetition."""
        if isinstance(node, ast.List | ast.Tuple | ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
        ):
            return 1
        if depth > 8 or not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            return None
        for seq, count in ((node.left, node.right), (node.right, node.left)):
            inner = self.copies(seq, depth + 1)
            if inner is None:
                continue
            value = self.literal_int(count)
            if value is None:
                return self.limits.max_literal_count + 1 if self._is_int_expr(count) else None
            return inner * max(value, 0)
        return None

    def repeat_bomb(self, node: ast.BinOp) -> None:
        total = self.copies(node)
        if total is not None and total > self.limits.max_literal_count:
            self.add(
                Code.LITERAL_BOMB,
                node,
                what="this literal repetition",
                limit=f"{self.limits.max_literal_count:,}",
            )

    def _numeric_literal(self, node: ast.AST) -> bool:
        """A number written out (`2`, `0.5`, `-1`, `10 ** 3`), not computed from values."""
        return all(
            isinstance(n, ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop)
            or (isinstance(n, ast.Constant) and type(n.value) in (int, float))
            for n in ast.walk(node)
        )

    def _is_int_expr(self, node: ast.AST) -> bool:
        """An int-literal expression too large to fold (e.g. 10**10**10)."""
        return all(
            isinstance(n, ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop)
            or (isinstance(n, ast.Constant) and type(n.value) is int)
            for n in ast.walk(node)
        )

    def range_bomb(self, node: ast.Call) -> None:
        if not (isinstance(node.func, ast.Name) and node.func.id == "range"):
            return
        for arg in node.args:
            value = self.literal_int(arg)
            huge = value is None and self._is_int_expr(arg)
            if huge or (value is not None and abs(value) > self.limits.max_literal_count):
                self.add(
                    Code.LITERAL_BOMB,
                    node,
                    what="this literal range",
                    limit=f"{self.limits.max_literal_count:,}",
                )
                return

    # -- the walk --------------------------------------------------------------------------

    def bound_names(self, tree: ast.AST) -> set[str]:
        bound: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                bound.add(node.id)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, _NAMED_BINDERS):
                if node.name:
                    bound.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                bound.add(node.rest)
        return bound

    # Why this size: the visitor's dispatch over node types: one branch per rule, each short
    def walk(self, tree: ast.Module) -> int:
        """Check every node; returns the longest string literal seen."""
        known = _KNOWN_GLOBALS | self.bound_names(tree)
        longest = 0
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                self.add(Code.BANNED_IMPORT, node)
            elif isinstance(node, ast.While):
                self.add(Code.BANNED_WHILE, node)
            elif isinstance(node, ast.Lambda):
                self.add(Code.BANNED_LAMBDA, node)
            elif isinstance(node, ast.ClassDef):
                self.add(Code.BANNED_CLASS, node)
            elif isinstance(node, ast.With):
                self.add(Code.BANNED_WITH, node)
            elif isinstance(node, ast.AsyncWith):
                self.add(Code.BANNED_WITH, node)
                self.add(Code.BANNED_ASYNC, node, kind="async with")
            elif isinstance(node, ast.Raise):
                self.add(Code.BANNED_RAISE, node)
            elif isinstance(node, ast.Global):
                self.add(Code.BANNED_GLOBAL, node, kind="global")
            elif isinstance(node, ast.Nonlocal):
                self.add(Code.BANNED_GLOBAL, node, kind="nonlocal")
            elif isinstance(node, ast.Await):
                self.add(Code.BANNED_ASYNC, node, kind="await")
            elif isinstance(node, ast.AsyncFor):
                self.add(Code.BANNED_ASYNC, node, kind="async for")
            elif isinstance(node, ast.comprehension) and node.is_async:
                self.add(Code.BANNED_ASYNC, node.target, kind="async comprehension")
            elif isinstance(node, ast.Yield):
                self.add(Code.BANNED_YIELD, node, kind="yield")
            elif isinstance(node, ast.YieldFrom):
                self.add(Code.BANNED_YIELD, node, kind="yield from")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if isinstance(node, ast.AsyncFunctionDef):
                    self.add(Code.BANNED_ASYNC, node, kind="async def")
                if node.decorator_list:
                    self.add(Code.BANNED_DECORATOR, node.decorator_list[0])
                self.name(node.name, node)
            elif isinstance(node, ast.Try | ast.TryStar):
                if isinstance(node, ast.TryStar):
                    self.add(Code.BANNED_TRY_STAR, node)
                if node.finalbody:
                    self.add(Code.BANNED_FINALLY, node.finalbody[0])
            elif isinstance(node, ast.ExceptHandler):
                self.except_handler(node)
            elif isinstance(node, ast.Name):
                banned = self.name(node.id, node)
                if not banned and isinstance(node.ctx, ast.Load) and node.id not in known:
                    self.add(Code.UNKNOWN_NAME, node, name=node.id)
            elif isinstance(node, ast.Attribute):
                self.attribute(node.attr, node)
                if not isinstance(node.ctx, ast.Load):
                    self.add(Code.ATTRIBUTE_ASSIGNMENT, node, name=node.attr)
                if isinstance(node.value, ast.Name) and node.value.id in _MODULE_EXPORTS:
                    exports = _MODULE_EXPORTS[node.value.id]
                    if node.attr not in exports and not node.attr.startswith("_"):
                        self.add(
                            Code.UNKNOWN_MODULE_ATTRIBUTE,
                            node,
                            module=node.value.id,
                            name=node.attr,
                            names=", ".join(sorted(exports)),
                        )
            elif isinstance(node, ast.arg):
                self.name(node.arg, node)
            elif isinstance(node, ast.keyword):
                if node.arg is not None and node.arg.startswith("_"):
                    self.add(Code.PRIVATE_NAME, node, name=node.arg)
            elif isinstance(node, ast.MatchAs | ast.MatchStar):
                if node.name:
                    self.name(node.name, node)
            elif isinstance(node, ast.MatchMapping):
                if node.rest:
                    self.name(node.rest, node)
            elif isinstance(node, ast.MatchClass):
                for attr in node.kwd_attrs:
                    self.attribute(attr, node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
                longest = max(longest, len(node.value))
                if len(node.value) > self.limits.max_string_literal:
                    self.add(
                        Code.STRING_TOO_LONG,
                        node,
                        n=len(node.value),
                        limit=self.limits.max_string_literal,
                    )
            elif isinstance(node, ast.BinOp):
                if isinstance(node.op, ast.Pow):
                    self.power_bomb(node)
                elif isinstance(node.op, ast.Mult):
                    self.repeat_bomb(node)
            elif isinstance(node, ast.Call):
                self.range_bomb(node)
        return longest

    def except_handler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.name(node.name, node)
        if node.type is None:
            self.add(Code.BARE_EXCEPT, node)
            return
        types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        for kind in types:
            allowed = (isinstance(kind, ast.Name) and kind.id in _CATCHABLE) or (
                isinstance(kind, ast.Attribute)
                and kind.attr == "error"
                and isinstance(kind.value, ast.Name)
                and kind.value.id == "re"
            )
            if not allowed:
                self.add(Code.EXCEPT_TYPE, kind, name=_source_of(kind))


#: How `sandbox/compose.py` names the factory that wraps one link of a composed hook.
LINK_FACTORY = re.compile(r"link[0-9]+")


def _count_defs(tree: ast.AST) -> int:
    return sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(tree))


def _is_link_factory(stmt: ast.stmt) -> bool:
    """`def linkN(): <a hook module's defs> return hook`: one link of a composed hook."""
    if not isinstance(stmt, ast.FunctionDef) or not LINK_FACTORY.fullmatch(stmt.name):
        return False
    args = stmt.args
    if args.posonlyargs or args.args or args.vararg or args.kwonlyargs or args.kwarg:
        return False
    last = stmt.body[-1]
    returns_hook = (
        isinstance(last, ast.Return)
        and isinstance(last.value, ast.Name)
        and last.value.id == "hook"
    )
    nested_hooks = [s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "hook"]
    return returns_hook and len(nested_hooks) == 1


def _source_of(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - only for a message
        text = type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."
