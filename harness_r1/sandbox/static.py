"""Static checks of a Patch: the first (and weakest) layer of the sandbox.

An AST filter is not a security boundary (see DESIGN.md, Sandbox); it rejects the obvious, gives
the engineer model stable error codes it can learn from, and keeps the isolated worker's job
small. Everything it misses must still be contained at run time by the worker (process
isolation, rlimits, seccomp/Landlock, per-call wall budget).

Each violation carries a stable `code` (the `Code` enum; never renamed, only added to), a
message that says what to do instead, the hook it belongs to, and a 1-based line and column.

The rules, by code:
- size: `source_too_long` (chars per hook), `too_many_nodes` (AST nodes), `string_too_long`
  (one string/bytes literal, implicit concatenations counted as one), `too_many_helpers`
  (functions besides `hook`, nested ones included; in a composed hook, counted per link:
  each `linkN` factory of `sandbox/compose.py` may hold that many besides its own `hook`);
- shape: `syntax_error`, `missing_hook`, `duplicate_hook`, `bad_signature` (`def hook(ctx,
  state)`: exactly two positional parameters, any non-underscore names, no defaults, *args,
  **kwargs or keyword-only parameters), `top_level_statement` (only defs and a module
  docstring at top level), `banned_decorator`;
- banned syntax: `banned_import`, `banned_while`, `banned_lambda`, `banned_class`, `banned_with`,
  `banned_raise`, `banned_global` (global and nonlocal), `banned_async` (async def, await,
  async for/with/comprehensions), `banned_yield`;
- try/except, allowed but narrowed: `bare_except`, `except_type` (only CATCHABLE_EXCEPTIONS by
  name and `re.error`; never Exception/BaseException), `banned_finally`, `banned_try_star`.
  Why: a hook that raises simply has no effect, so catching is a convenience (`int(x)` on model
  text), but a catch-all could swallow the worker's limit exceptions (or MemoryError,
  RecursionError) and turn a limit into a loop, and a `finally` block runs more code after a
  limit fired. The worker's limit exceptions derive from BaseException only (hooklib.py);
- names: `private_name` (a name starting with `_`; the single `_` throwaway name is allowed),
  `banned_name` (BANNED_NAMES, in any position, even as a variable), `banned_module`
  (BANNED_MODULES, likewise), `unknown_name` (read but never bound in the module and not in
  the hook scope: ALLOWED_BUILTINS + re, math, similarity, closest);
- attributes: `private_attribute` (starting with `_`), `banned_attribute` (str.format and
  format_map, mro, and the frame/code/traceback/generator internals: any attribute starting
  with gi_, f_, tb_, cr_, ag_, co_, func_), `attribute_assignment` (`x.a = ...` or `del x.a`:
  a hook's data lives in `state`; this also keeps a hook from planting attributes on the shared
  helper functions of a warm worker), `unknown_module_attribute` (`re.X` / `math.X` outside
  RE_EXPORTS / MATH_EXPORTS: the real `re` module exposes `re.enum.sys`). Match-class keyword
  patterns (`case str(__class__=c)`) read attributes too and are checked the same way;
- `literal_bomb`: a cheap, best-effort catch of literal exponent bombs (`10**9`, `9**9**9`:
  a folded `a ** b` of int literals at or above `max_power_result`), literal repetition
  (`'a' * 10**6`, `[0] * 1000000`, `'a' * 1000 * 1000`) and literal ranges (`range(10**9)`) beyond
  `max_literal_count`. Memory and CPU bombs built from values (`'a' * n`, `range(n)`,
  catastrophic regexes, deep recursion) cannot be stopped statically in general: they are
  contained at run time by the worker's rlimits and wall budget;
- `computed_exponent`: `x ** n` with an exponent that is not a number written out: one big-int
  power in C, which no wall budget interrupts (`math.factorial`, `comb`, `perm`, `prod` and
  `lcm` are left out of `math` for the same reason, `hooklib.py`);
- `uncheckable`: the checker itself failed on this hook (fail closed).

Decisions on borderline syntax: generator expressions are allowed (`any(a in s for a in xs)` is
everyday code; the frame walk through `gi_frame` is blocked by the attribute rule), `assert` is
allowed (it raises AssertionError, which no hook can catch, so it only means "no effect"), `del`
of names and subscripts is allowed, f-strings (with `!r`, `!s`, nested format specs) are
allowed (they cannot read attributes by a string name, unlike str.format), `match` is allowed.
`isinstance` is a builtin; `type`, `id`, `bytearray`, `memoryview`, `iter` and `print` are not.

Why one module: one AST visitor whose rules share its walk and state (hook,
nesting, folded literals); split by rule, each part would need the whole visitor.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness_r1.contracts import HookMode, Patch
from harness_r1.sandbox.hooklib import (
    ALLOWED_BUILTINS,
    CATCHABLE_EXCEPTIONS,
    MATH_EXPORTS,
    RE_EXPORTS,
    SCOPE_NAMES,
)

__all__ = [
    "ALLOWED_BUILTINS",
    "BANNED_ATTRIBUTES",
    "BANNED_ATTRIBUTE_PREFIXES",
    "BANNED_MODULES",
    "BANNED_NAMES",
    "Code",
    "HookStats",
    "StaticLimits",
    "StaticReport",
    "Violation",
    "check_patch",
    "check_source",
]


class Code(StrEnum):
    """Stable violation codes. Add new ones; never rename or reuse one."""

    SOURCE_TOO_LONG = "source_too_long"
    SYNTAX_ERROR = "syntax_error"
    TOO_MANY_NODES = "too_many_nodes"
    STRING_TOO_LONG = "string_too_long"
    TOO_MANY_HELPERS = "too_many_helpers"
    MISSING_HOOK = "missing_hook"
    DUPLICATE_HOOK = "duplicate_hook"
    BAD_SIGNATURE = "bad_signature"
    TOP_LEVEL_STATEMENT = "top_level_statement"
    BANNED_DECORATOR = "banned_decorator"
    BANNED_IMPORT = "banned_import"
    BANNED_WHILE = "banned_while"
    BANNED_LAMBDA = "banned_lambda"
    BANNED_CLASS = "banned_class"
    BANNED_WITH = "banned_with"
    BANNED_RAISE = "banned_raise"
    BANNED_GLOBAL = "banned_global"
    BANNED_ASYNC = "banned_async"
    BANNED_YIELD = "banned_yield"
    BARE_EXCEPT = "bare_except"
    EXCEPT_TYPE = "except_type"
    BANNED_FINALLY = "banned_finally"
    BANNED_TRY_STAR = "banned_try_star"
    PRIVATE_NAME = "private_name"
    PRIVATE_ATTRIBUTE = "private_attribute"
    BANNED_NAME = "banned_name"
    BANNED_MODULE = "banned_module"
    BANNED_ATTRIBUTE = "banned_attribute"
    ATTRIBUTE_ASSIGNMENT = "attribute_assignment"
    UNKNOWN_NAME = "unknown_name"
    UNKNOWN_MODULE_ATTRIBUTE = "unknown_module_attribute"
    LITERAL_BOMB = "literal_bomb"
    UNCHECKABLE = "uncheckable"
    COMPUTED_EXPONENT = "computed_exponent"


def _short(node: ast.AST, limit: int = 40) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_NO_IO = "hooks have no I/O; return an effect (or store data in `state`) instead"
_NO_CODE = "hooks cannot run generated code"
_BY_KEY = "read values by key instead: ctx['observation'], d.get('key', default)"
_NO_INTROSPECTION = "introspection is not available in hooks"
_NO_CLASSES = "classes are not available in hooks; use dicts and functions"

#: Names a hook may not use anywhere (not even as its own variable), with a hint for each.
BANNED_NAMES: dict[str, str] = {
    "eval": _NO_CODE,
    "exec": _NO_CODE,
    "compile": _NO_CODE,
    "__import__": "imports are not allowed",
    "__builtins__": _NO_INTROSPECTION,
    "open": "hooks cannot touch files",
    "input": _NO_IO,
    "print": _NO_IO,
    "breakpoint": _NO_IO,
    "help": _NO_IO,
    "exit": _NO_IO,
    "quit": _NO_IO,
    "getattr": _BY_KEY,
    "setattr": _BY_KEY,
    "delattr": _BY_KEY,
    "hasattr": _BY_KEY,
    "type": "use isinstance(x, str) to test a type",
    "vars": _NO_INTROSPECTION,
    "globals": _NO_INTROSPECTION,
    "locals": _NO_INTROSPECTION,
    "dir": _NO_INTROSPECTION,
    "object": _NO_CLASSES,
    "super": _NO_CLASSES,
    "classmethod": _NO_CLASSES,
    "staticmethod": _NO_CLASSES,
    "property": _NO_CLASSES,
    "memoryview": "byte buffers are not available in hooks",
    "bytearray": "byte buffers are not available in hooks",
    "iter": "iter(f, sentinel) is an unbounded loop; use a for loop over a list",
}

#: Module names a hook may not mention anywhere (only re and math are in scope).
BANNED_MODULES: frozenset[str] = frozenset(
    {
        "os",
        "sys",
        "builtins",
        "subprocess",
        "socket",
        "importlib",
        "ctypes",
        "signal",
        "pickle",
        "marshal",
        "shutil",
        "pathlib",
        "io",
        "threading",
        "multiprocessing",
        "gc",
        "inspect",
        "posix",
        "resource",
        "mmap",
        "tempfile",
        "runpy",
        "pty",
        "fcntl",
        "asyncio",
        "urllib",
        "http",
        "ssl",
        "select",
        "sysconfig",
    }
)

_FORMAT_HINT = (
    "str.format can read attributes through its fields; build strings with f-strings or +"
)
_INTERNALS_HINT = "frame, code, traceback and generator internals are off limits"

#: Attributes a hook may not read or write, with a hint for each.
BANNED_ATTRIBUTES: dict[str, str] = {
    "format": _FORMAT_HINT,
    "format_map": _FORMAT_HINT,
    "mro": _NO_INTROSPECTION,
    "im_func": _INTERNALS_HINT,
    "im_self": _INTERNALS_HINT,
}
#: Attribute prefixes of frames (f_), code (co_), tracebacks (tb_), generators (gi_),
#: coroutines (cr_), async generators (ag_) and old function internals (func_).
BANNED_ATTRIBUTE_PREFIXES: tuple[str, ...] = ("gi_", "f_", "tb_", "cr_", "ag_", "co_", "func_")

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
_CATCHABLE_TEXT = ", ".join(CATCHABLE_EXCEPTIONS) + " and re.error"
_SCOPE_TEXT = (
    "hooks may use their parameters, local variables, helper functions, re, math, similarity, "
    "closest and these builtins: " + ", ".join(ALLOWED_BUILTINS)
)

MESSAGES: dict[Code, str] = {
    Code.SOURCE_TOO_LONG: "hook source is {n} characters; the limit is {limit}: shorten it",
    Code.SYNTAX_ERROR: "syntax error: {detail}",
    Code.TOO_MANY_NODES: "hook has {n} syntax nodes; the limit is {limit}: simplify it",
    Code.STRING_TOO_LONG: "string literal of {n} characters; the limit is {limit}",
    Code.TOO_MANY_HELPERS: "{n} helper functions besides hook; the limit is {limit}",
    Code.MISSING_HOOK: "define one top-level `def hook(ctx, state):`; none was found",
    Code.DUPLICATE_HOOK: "`hook` is defined more than once at top level; define it once",
    Code.BAD_SIGNATURE: (
        "hook must be `def hook(ctx, state)`: exactly two positional parameters, "
        "no defaults, *args, **kwargs or keyword-only parameters"
    ),
    Code.TOP_LEVEL_STATEMENT: (
        "only function definitions and a docstring may appear at top level; "
        "move this `{kind}` into a function"
    ),
    Code.BANNED_DECORATOR: "decorators are not allowed",
    Code.BANNED_IMPORT: "imports are not allowed: re, math, similarity and closest are in scope",
    Code.BANNED_WHILE: "`while` loops are not allowed: use `for` over a bounded range or list",
    Code.BANNED_LAMBDA: "`lambda` is not allowed: define a helper function with `def`",
    Code.BANNED_CLASS: "classes are not allowed: use dicts and functions",
    Code.BANNED_WITH: "`with` statements are not allowed",
    Code.BANNED_RAISE: "`raise` is not allowed: return None for no effect",
    Code.BANNED_GLOBAL: "`{kind}` is not allowed: keep per-episode data in `state`",
    Code.BANNED_ASYNC: "async code ({kind}) is not allowed",
    Code.BANNED_YIELD: "`{kind}` is not allowed: a hook returns its effect",
    Code.BARE_EXCEPT: (
        "a bare `except:` is not allowed: name the exceptions, e.g. `except (ValueError, "
        "KeyError):`"
    ),
    Code.EXCEPT_TYPE: "`except {name}` is not allowed: hooks may catch only " + _CATCHABLE_TEXT,
    Code.BANNED_FINALLY: "`finally` is not allowed",
    Code.BANNED_TRY_STAR: "`except*` is not allowed",
    Code.PRIVATE_NAME: "name `{name}` starts with an underscore: such names are not allowed",
    Code.PRIVATE_ATTRIBUTE: (
        "attribute `.{name}` starts with an underscore: such attributes are not allowed"
    ),
    Code.BANNED_NAME: "`{name}` is not allowed in hooks, not even as a variable: {hint}",
    Code.BANNED_MODULE: (
        "`{name}` is a module hooks cannot use (not even as a variable name); "
        "only re, math, similarity and closest are in scope"
    ),
    Code.BANNED_ATTRIBUTE: "attribute `.{name}` is not allowed: {hint}",
    Code.ATTRIBUTE_ASSIGNMENT: (
        "assigning or deleting attributes (`.{name}`) is not allowed: keep data in `state` "
        "or in a dict"
    ),
    Code.UNKNOWN_NAME: "name `{name}` is not defined: " + _SCOPE_TEXT,
    Code.UNKNOWN_MODULE_ATTRIBUTE: "`{module}.{name}` is not available; {module} offers: {names}",
    Code.LITERAL_BOMB: "{what} is too large for a hook (limit {limit})",
    Code.UNCHECKABLE: "the checker could not analyse this hook ({detail}); simplify it",
    Code.COMPUTED_EXPONENT: (
        "`** {exponent}`: a computed exponent can make a number of any size in one C call "
        "that no budget interrupts; write the exponent as a number (x ** 2, x ** 0.5)"
    ),
}


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
