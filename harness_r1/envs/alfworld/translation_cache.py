"""TextWorld's PDDL-to-SAS translation, memoised per process.

Why: TextWorld builds a new `PddlState` on every game load *and* on every reset, and each one
translates the game's PDDL problem into fast-downward's SAS format twice (plainly, and
optimised for re-planning) with fast-downward's pure-Python translator. Switching an engine
to another game therefore translates the same problem four times, and every reset twice: most
of ALFWorld's reset time (issue 16). The translation is a pure function of the domain text, the
problem text and the flags, and the problem is always the game's *initial* state (the state is
then moved by fast-downward's library, not by re-translating), so one translation per game and
flag serves every later load and reset.

Sharing the result is safe: `PddlState` only reads the parsed task it gets back (its actions,
types, objects and initial facts; textworld 1.6) and hands the SAS text to fast-downward's
library, which parses its own copy. The memo is bounded (`MAX_GAMES` games x two flags).

`install()` replaces `fast_downward.pddl2sas` in this process (the name TextWorld calls) and is
idempotent; `translations()` says how often the memo answered, `clear_translations()` empties it.
"""

from __future__ import annotations

import functools
from typing import Any

MAX_GAMES = 64


def install() -> None:
    """Route TextWorld's translations through the memo (once per process)."""
    import fast_downward

    if getattr(fast_downward.pddl2sas, "memoised", False):
        return
    original = fast_downward.pddl2sas

    @functools.lru_cache(maxsize=2 * MAX_GAMES)
    def memoised(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        return original(domain, problem, verbose=verbose, optimize=optimize)

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        return memoised(domain, problem, bool(verbose), bool(optimize))

    pddl2sas.memoised = True  # type: ignore[attr-defined]
    pddl2sas.cache_info = memoised.cache_info  # type: ignore[attr-defined]
    pddl2sas.cache_clear = memoised.cache_clear  # type: ignore[attr-defined]
    fast_downward.pddl2sas = pddl2sas


def clear_translations() -> None:
    """Forget every translation (benchmarks: each configuration starts cold)."""
    import fast_downward

    clear_memo = getattr(fast_downward.pddl2sas, "cache_clear", None)
    if clear_memo is not None:
        clear_memo()


def translations() -> tuple[int, int]:
    """(answered from the memo, translated) since install(); (0, 0) before it."""
    import fast_downward

    info = getattr(fast_downward.pddl2sas, "cache_info", None)
    if info is None:
        return 0, 0
    stats = info()
    return stats.hits, stats.misses
