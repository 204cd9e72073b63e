"""The attack corpus's CONTAINED table: hostile hooks that pass the static checks and are
stopped at run time by the worker (address space limit, wall-clock budget, recursion limit,
response size limit, JSON encoding), each with the fault it must end in; the worker's scope is
still clean for the next call."""

from __future__ import annotations

import pytest
from attack_corpus_rig import BIG, SHORT, Contained, Host, Run, contain, hook

CONTAINED: list[Contained] = [
    # -- memory bombs with sizes computed at run time ------------------------------------------
    Contained("string_repeat", hook(BIG + "return len('a' * n)"), Run("memory", "MemoryError")),
    Contained("list_repeat", hook(BIG + "return len([0] * n)"), Run("memory", "MemoryError")),
    Contained(
        "str_ljust", hook("return len('a'.ljust(10 ** 8 * 10))"), Run("memory", "MemoryError")
    ),
    Contained("big_int_shift", hook(BIG + "return (1 << n) > 0"), Run("memory", "MemoryError")),
    Contained(
        "string_doubling",
        hook("s = 'a'\nfor i in range(64):\n    s = s + s\nreturn len(s)"),
        Run("memory|timeout", "MemoryError"),
    ),
    Contained(
        "nested_comprehension",
        hook("return len([[0] * 100000 for i in range(100000) for j in range(100000)])"),
        Run("memory|timeout", "MemoryError"),
    ),
    Contained(
        "list_doubles_while_iterated",
        hook("xs = [1]\nfor x in xs:\n    xs.extend(xs)\nreturn len(xs)"),
        Run("memory", "MemoryError"),
    ),
    Contained(
        "dict_growth",
        hook(BIG + "return len({i: i for i in range(n)})"),
        Run("memory", "MemoryError"),
    ),
    Contained(
        "expandtabs",
        hook("return len(('\\t' * 1000).expandtabs(1000000))"),
        Run("memory", "MemoryError"),
    ),
    Contained(
        "replace_growth",
        hook(
            "s = 'a' * 100000\nfor i in range(4):\n    s = s.replace('a', 'a' * 10)\nreturn len(s)"
        ),
        Run("memory", "MemoryError"),
    ),
    Contained(
        "repr_of_a_huge_list",
        hook("x = [0] * int('5' + '0' * 7)\nreturn len(repr(x))"),
        Run("memory", "MemoryError"),
    ),
    # -- `while` alternatives, slow and CPU-bound hooks ----------------------------------------
    Contained(
        "busy_wait_over_a_computed_range",
        hook(BIG + "t = 0\nfor i in range(n):\n    t += 1\nreturn t"),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "nested_loops_under_the_literal_limit",
        hook(
            "t = 0\nfor i in range(100000):\n    for j in range(100000):\n        t += 1\nreturn t"
        ),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "list_grows_while_iterated",
        hook("xs = [1]\nfor x in xs:\n    xs.append(x)\nreturn len(xs)"),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "join_of_a_huge_generator",
        hook(BIG + "return len(''.join('a' for i in range(n)))"),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "exponential_recursion",
        hook(
            "return f(60)",
            "def f(n):\n    if n == 0:\n        return 1\n    return f(n - 1) + f(n - 1)\n",
        ),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "catastrophic_regex",
        hook("return bool(re.match('(a+)+$', 'a' * 40 + 'b'))"),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "slow_helper_calls",
        hook(
            "a = 'ab' * 1000\nb = 'ba' * 1000\nt = 0\n"
            "for i in range(100000):\n    t += similarity(a, b)\nreturn t"
        ),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "allowed_except_in_a_spin",
        hook(
            "t = 0\nfor i in range(100000):\n    for j in range(100000):\n        try:\n"
            "            t += int('x')\n        except ValueError:\n            t -= 1\nreturn t"
        ),
        Run("timeout", "no response within the budget", SHORT),
    ),
    Contained(
        "billion_laughs_return_value",
        hook("x = ['aaaa']\nfor i in range(40):\n    x = [x, x]\nreturn x"),
        Run("timeout", "no response within the budget", SHORT),  # the JSON encoding never ends
    ),
    # -- recursion, output size, odd values ----------------------------------------------------
    Contained(
        "unbounded_recursion",
        hook("return f(0)", "def f(n):\n    return f(n + 1)\n"),
        Run("raised", "RecursionError"),
    ),
    Contained(
        "mutual_recursion",
        hook("return f(0)", "def f(n):\n    return g(n + 1)\ndef g(n):\n    return f(n + 1)\n"),
        Run("raised", "RecursionError"),
    ),
    Contained(
        "deeply_nested_return_value",
        hook("x = []\nfor i in range(100000):\n    x = [x]\nreturn x"),
        Run("junk", "RecursionError"),
    ),
    Contained(
        "deeply_nested_state",
        hook("x = {}\nfor i in range(100000):\n    x = {'a': x}\nstate['x'] = x\nreturn None"),
        Run("junk", "RecursionError"),
    ),
    Contained(
        "ten_megabyte_return_value",
        hook("n = 10 ** 7\nreturn {'effect': 'rewrite', 'text': 'a' * n}"),
        Run("oversized", "the limit is 262144"),
    ),
    Contained(
        "ten_megabyte_state",
        hook("n = 10 ** 7\nstate['blob'] = 'a' * n\nreturn None"),
        Run("oversized", "the limit is 262144"),
    ),
    Contained(
        "format_spec_carrying_a_field",
        hook("s = '{0.__class__}'\nreturn f'{ctx!r:{s}}'"),
        Run("raised", "Invalid format specifier"),
    ),
    Contained(
        "huge_int_to_text",
        hook("return str(1 << 20000)"),
        Run("raised", "Exceeds the limit (4300 digits)"),
    ),
    Contained(
        "generator_calls_itself",
        hook("g = (next(g) for x in [1])\nreturn next(g)"),
        Run("raised", "generator already executing"),
    ),
]


@pytest.mark.parametrize("case", CONTAINED, ids=[c.name for c in CONTAINED])
def test_hooks_past_the_filter_are_contained_at_run_time(case: Contained, host: Host) -> None:
    contain(case.code, case.run, host)
