"""What a hook can see besides its arguments: the whitelisted builtins, `re`, `math`,
`similarity` and `closest`. The static checks (`static.py`) and the isolated worker both read
these tables, so what the checker accepts is exactly what the worker provides.

Names in a hook's scope, all of them:
- `ctx`, `state` (the hook's two parameters), its local variables and helper functions;
- `ALLOWED_BUILTINS` below (the worker builds `__builtins__` from exactly these names);
- `re`: a read-only namespace with the public regex functions and flags in `RE_EXPORTS`, NOT the
  real module (the real `re` module carries `re.enum`, `re.functools`, `re.copyreg`, and
  `re.enum.sys` reaches `sys.modules` without a single underscore);
- `math`: a read-only namespace with `MATH_EXPORTS` (the public math functions and constants,
  minus `factorial`, `comb`, `perm`, `prod` and `lcm`, uninterruptible C loops over
  big integers that no hook needs);
- `similarity(a, b) -> float` and `closest(text, options, cutoff=0.0) -> str | None`: two plain
  functions (not a namespace object), defined below.

`hook_globals()` builds a fresh globals dict for one patch load: the worker must call it once
per patch (never share one dict between patches), so nothing a patch does to its globals can
reach another patch even in a warm worker.

Exceptions: a hook may catch only `CATCHABLE_EXCEPTIONS` (by name) and `re.error`. The worker's
own limit and timeout exceptions must therefore derive from `BaseException` directly (never from
one of these), so no hook can swallow them and turn a limit into a loop.
"""

from __future__ import annotations

import builtins
import difflib
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Exception classes a hook may name in `except`; also present in its builtins.
CATCHABLE_EXCEPTIONS: tuple[str, ...] = (
    "ValueError",
    "KeyError",
    "IndexError",
    "TypeError",
    "ZeroDivisionError",
)

#: Builtins a hook may use, by name. Left out on purpose: everything that reaches objects by a
#: string name (getattr & co), introspection (type, vars, dir, id), code execution, I/O
#: (open, print, input), `iter` (`iter(f, sentinel)` is an unbounded loop), byte buffers.
ALLOWED_BUILTINS: tuple[str, ...] = (
    "abs",
    "all",
    "any",
    "bool",
    "chr",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "frozenset",
    "int",
    "isinstance",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "ord",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    *CATCHABLE_EXCEPTIONS,
)

#: What `re.X` may name in a hook.
RE_EXPORTS: tuple[str, ...] = (
    "compile",
    "error",
    "escape",
    "findall",
    "finditer",
    "fullmatch",
    "match",
    "search",
    "split",
    "sub",
    "subn",
    "A",
    "ASCII",
    "DOTALL",
    "I",
    "IGNORECASE",
    "M",
    "MULTILINE",
    "NOFLAG",
    "S",
    "U",
    "UNICODE",
    "VERBOSE",
    "X",
)

_MATH_LEFT_OUT = frozenset({"factorial", "comb", "perm", "prod", "lcm"})

#: What `math.X` may name in a hook.
MATH_EXPORTS: tuple[str, ...] = tuple(
    sorted(n for n in dir(math) if not n.startswith("_") and n not in _MATH_LEFT_OUT)
)

#: Module-like names in a hook's scope besides the builtins.
SCOPE_NAMES: tuple[str, ...] = ("re", "math", "similarity", "closest")

#: Text longer than this is compared on its first MAX_COMPARE_CHARS characters (the ratio is
#: quadratic in the worst case).
MAX_COMPARE_CHARS = 2000
#: `closest` looks at no more than this many options.
MAX_OPTIONS = 500


def _norm(text: str) -> str:
    return " ".join(text.lower().split())[:MAX_COMPARE_CHARS]


def similarity(a: str, b: str) -> float:
    """Similarity in [0, 1] of two strings, case- and whitespace-insensitive.

    difflib's SequenceMatcher ratio on the lowercased, whitespace-collapsed strings.
    """
    if not isinstance(a, str) or not isinstance(b, str):
        raise TypeError("similarity(a, b) takes two strings")
    return difflib.SequenceMatcher(None, _norm(a), _norm(b)).ratio()


def closest(text: str, options: Iterable[str], cutoff: float = 0.0) -> str | None:
    """The option most similar to `text` (an exact case-insensitive match wins outright).

    None when there are no options or the best ratio is below `cutoff`; ties go to the first
    option. Non-string options are skipped; only the first MAX_OPTIONS are considered.
    """
    if not isinstance(text, str):
        raise TypeError("closest(text, options) takes a string and a list of strings")
    if options is None:
        return None
    target = _norm(text)
    best: str | None = None
    best_ratio = -1.0
    for index, option in enumerate(options):
        if index >= MAX_OPTIONS:
            break
        if not isinstance(option, str):
            continue
        candidate = _norm(option)
        if candidate == target:
            return option
        ratio = difflib.SequenceMatcher(None, target, candidate).ratio()
        if ratio > best_ratio:
            best, best_ratio = option, ratio
    if best is None or best_ratio < cutoff:
        return None
    return best


class Namespace:
    """A read-only bag of attributes standing in for a module inside a hook."""

    def __init__(self, name: str, items: Mapping[str, Any]) -> None:
        for key, value in items.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_namespace_name", name)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("hook namespaces are read-only")

    def __delattr__(self, key: str) -> None:
        raise AttributeError("hook namespaces are read-only")

    def __repr__(self) -> str:
        return f"<hook namespace {object.__getattribute__(self, '_namespace_name')}>"


def hook_builtins() -> dict[str, Any]:
    """The `__builtins__` mapping of a hook: exactly ALLOWED_BUILTINS."""
    return {name: getattr(builtins, name) for name in ALLOWED_BUILTINS}


def hook_globals() -> dict[str, Any]:
    """A fresh globals dict for executing a hook module: new namespace objects and new helper
    function objects each time, so nothing one call does to them (past the static filter) can
    reach a later call. The worker builds one per call."""

    def similarity_(a: str, b: str) -> float:
        return similarity(a, b)

    def closest_(text: str, options: Iterable[str], cutoff: float = 0.0) -> str | None:
        return closest(text, options, cutoff)

    similarity_.__doc__, closest_.__doc__ = similarity.__doc__, closest.__doc__
    return {
        "__builtins__": hook_builtins(),
        "__name__": "hook",
        "re": Namespace("re", {name: getattr(re, name) for name in RE_EXPORTS}),
        "math": Namespace("math", {name: getattr(math, name) for name in MATH_EXPORTS}),
        "similarity": similarity_,
        "closest": closest_,
    }
