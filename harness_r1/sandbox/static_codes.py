"""The static checks' vocabulary: the stable violation codes, the message each one gives, and
the names, modules and attributes a hook may not use.

Each violation carries a stable `code` (the `Code` enum; never renamed, only added to) and a
message that says what to do instead; `static_checker.py` decides which code a hook earns,
`static_report.py` holds the violation it becomes.

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

Why a module of its own: the codes and their wording are what the engineer model learns from
and what its prompt states (the trainer reads `Code` and BANNED_NAMES); kept apart from the AST
walk that applies them, a rule's code, its message and its banned names are read and extended
in one place, and their readers need none of the walk.
"""

from __future__ import annotations

from enum import StrEnum

from harness_r1.sandbox.hooklib import ALLOWED_BUILTINS, CATCHABLE_EXCEPTIONS

__all__ = [
    "BANNED_ATTRIBUTES",
    "BANNED_ATTRIBUTE_PREFIXES",
    "BANNED_MODULES",
    "BANNED_NAMES",
    "MESSAGES",
    "Code",
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
