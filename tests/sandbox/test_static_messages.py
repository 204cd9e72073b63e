"""Static checks, exactly: each violation's code, message, line and column, and every limit.

The engineer model learns from these messages and positions, so they are asserted in full
(test_static.py asserts which code each rule gives; this module asserts what it says and where).
"""

from __future__ import annotations

import textwrap

import pytest

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.sandbox.hooklib import ALLOWED_BUILTINS, MATH_EXPORTS, RE_EXPORTS
from harness_r1.sandbox.static import check_patch, check_source
from harness_r1.sandbox.static_codes import Code
from harness_r1.sandbox.static_report import HookStats, StaticLimits, StaticReport, Violation

Found = tuple[str, str, int | None, int | None]


def in_hook(body: str) -> str:
    return "def hook(ctx, state):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "\n"


def found(source: str, limits: StaticLimits | None = None) -> list[Found]:
    """(code, message, line, col) of every violation, in report order."""
    violations, _ = check_source(source, "pre_action", limits)
    assert {v.hook for v in violations} <= {"pre_action"}
    return [(str(v.code), v.message, v.line, v.col) for v in violations]


SCOPE = (
    "hooks may use their parameters, local variables, helper functions, re, math, similarity, "
    "closest and these builtins: abs, all, any, bool, chr, dict, divmod, enumerate, filter, "
    "float, frozenset, int, isinstance, len, list, map, max, min, next, ord, range, repr, "
    "reversed, round, set, sorted, str, sum, tuple, zip, ValueError, KeyError, IndexError, "
    "TypeError, ZeroDivisionError"
)
CATCHABLE = (
    "hooks may catch only ValueError, KeyError, IndexError, TypeError, ZeroDivisionError and "
    "re.error"
)
FORMAT_HINT = "str.format can read attributes through its fields; build strings with f-strings or +"
INTERNALS = "frame, code, traceback and generator internals are off limits"
TOP = (
    "only function definitions and a docstring may appear at top level; "
    "move this `{}` into a function"
)
BOMB_POWER = "this literal power is too large for a hook (limit 1,000,000,000)"
BOMB_REPEAT = "this literal repetition is too large for a hook (limit 100,000)"
BOMB_RANGE = "this literal range is too large for a hook (limit 100,000)"
MODULE = (
    "`{}` is a module hooks cannot use (not even as a variable name); "
    "only re, math, similarity and closest are in scope"
)


def unknown(name: str) -> str:
    return f"name `{name}` is not defined: {SCOPE}"


def private(name: str) -> str:
    return f"name `{name}` starts with an underscore: such names are not allowed"


def private_attr(name: str) -> str:
    return f"attribute `.{name}` starts with an underscore: such attributes are not allowed"


def except_type(name: str) -> str:
    return f"`except {name}` is not allowed: {CATCHABLE}"


def test_scope_text_lists_exactly_the_builtins_a_hook_gets() -> None:
    assert SCOPE.endswith("these builtins: " + ", ".join(ALLOWED_BUILTINS))


# -- every message and position, in full -------------------------------------------------

EXACT: list[tuple[str, str, list[Found]]] = [
    (
        "while",
        in_hook("while True:\n    pass"),
        [
            (
                "banned_while",
                "`while` loops are not allowed: use `for` over a bounded range or list",
                2,
                5,
            )
        ],
    ),
    (
        "lambda",
        in_hook("f = lambda: 0"),
        [("banned_lambda", "`lambda` is not allowed: define a helper function with `def`", 2, 9)],
    ),
    (
        "class",
        in_hook("class A:\n    pass"),
        [("banned_class", "classes are not allowed: use dicts and functions", 2, 5)],
    ),
    (
        "with",
        in_hook("with ctx as c:\n    pass"),
        [("banned_with", "`with` statements are not allowed", 2, 5)],
    ),
    (
        "raise",
        in_hook("raise ValueError"),
        [("banned_raise", "`raise` is not allowed: return None for no effect", 2, 5)],
    ),
    (
        "global_yield_yield_from",
        in_hook("global g\nyield 1\nyield from []"),
        [
            ("banned_global", "`global` is not allowed: keep per-episode data in `state`", 2, 5),
            ("banned_yield", "`yield` is not allowed: a hook returns its effect", 3, 5),
            ("banned_yield", "`yield from` is not allowed: a hook returns its effect", 4, 5),
        ],
    ),
    (
        "nonlocal_await",
        "def h():\n    n = 1\n    def f():\n        nonlocal n\n" + in_hook("await ctx"),
        [
            ("banned_global", "`nonlocal` is not allowed: keep per-episode data in `state`", 4, 9),
            ("banned_async", "async code (await) is not allowed", 6, 5),
        ],
    ),
    (
        "async_def_for",
        "async def f(x):\n    async for a in x:\n        pass\n" + in_hook("return None"),
        [
            ("banned_async", "async code (async def) is not allowed", 1, 1),
            ("banned_async", "async code (async for) is not allowed", 2, 5),
        ],
    ),
    (
        "async_with",
        "async def f(x):\n    async with x:\n        pass\n" + in_hook("return None"),
        [
            ("banned_async", "async code (async def) is not allowed", 1, 1),
            ("banned_with", "`with` statements are not allowed", 2, 5),
            ("banned_async", "async code (async with) is not allowed", 2, 5),
        ],
    ),
    (
        "async_comprehension_at_its_target",
        "async def f(x):\n    return [a async for a in x]\n" + in_hook("return None"),
        [
            ("banned_async", "async code (async def) is not allowed", 1, 1),
            ("banned_async", "async code (async comprehension) is not allowed", 2, 25),
        ],
    ),
    (
        "top_level_statements_by_kind",
        "import os\nfrom re import sub\nX = 1\nfor a in []:\n    pass\n1\n" + in_hook("return 1"),
        [
            ("top_level_statement", TOP.format("import"), 1, 1),
            (
                "banned_import",
                "imports are not allowed: re, math, similarity and closest are in scope",
                1,
                1,
            ),
            ("top_level_statement", TOP.format("importfrom"), 2, 1),
            (
                "banned_import",
                "imports are not allowed: re, math, similarity and closest are in scope",
                2,
                1,
            ),
            ("top_level_statement", TOP.format("assign"), 3, 1),
            ("top_level_statement", TOP.format("for"), 4, 1),
            ("top_level_statement", TOP.format("expr"), 6, 1),
        ],
    ),
    (
        "int_constant_first_is_no_docstring",
        "1\n" + in_hook("return 1"),
        [("top_level_statement", TOP.format("expr"), 1, 1)],
    ),
    (
        "missing_hook_and_late_docstring",
        "'''doc'''\n'''late'''\n",
        [
            (
                "missing_hook",
                "define one top-level `def hook(ctx, state):`; none was found",
                1,
                1,
            ),
            ("top_level_statement", TOP.format("expr"), 2, 1),
        ],
    ),
    (
        "decorator_at_the_first_decorator_and_duplicate_hook_at_the_second",
        "@len\n@abs\ndef h():\n    return 1\n" + in_hook("return None") + in_hook("return 1"),
        [
            ("banned_decorator", "decorators are not allowed", 1, 2),
            (
                "duplicate_hook",
                "`hook` is defined more than once at top level; define it once",
                7,
                1,
            ),
        ],
    ),
    (
        "bad_signature_at_the_def",
        "'''Doc.'''\n\ndef hook(ctx, state=1):\n    return None\n",
        [
            (
                "bad_signature",
                "hook must be `def hook(ctx, state)`: exactly two positional parameters, "
                "no defaults, *args, **kwargs or keyword-only parameters",
                3,
                1,
            )
        ],
    ),
    (
        "finally_at_its_first_statement",
        in_hook("try:\n    x = 1\nexcept ValueError:\n    x = 2\nfinally:\n    x = 3\n    x = 4"),
        [("banned_finally", "`finally` is not allowed", 7, 9)],
    ),
    (
        "try_star",
        in_hook("try:\n    x = 1\nexcept* ValueError:\n    x = 2"),
        [("banned_try_star", "`except*` is not allowed", 2, 5)],
    ),
    (
        "bare_except",
        in_hook("try:\n    x = 1\nexcept:\n    x = 2"),
        [
            (
                "bare_except",
                "a bare `except:` is not allowed: name the exceptions, e.g. "
                "`except (ValueError, KeyError):`",
                4,
                5,
            )
        ],
    ),
    (
        "except_types_each_by_its_source",
        in_hook(
            "try:\n    x = 1\n"
            "except (ValueError, Exception, re.error, re.foo, os.error) as _e:\n    x = 2"
        ),
        [
            ("private_name", private("_e"), 4, 5),
            ("except_type", except_type("Exception"), 4, 25),
            ("unknown_name", unknown("Exception"), 4, 25),
            ("except_type", except_type("re.foo"), 4, 49),
            (
                "unknown_module_attribute",
                "`re.foo` is not available; re offers: " + ", ".join(sorted(RE_EXPORTS)),
                4,
                49,
            ),
            ("banned_module", MODULE.format("os"), 4, 54),
            ("except_type", except_type("os.error"), 4, 57),
        ],
    ),
    (
        "except_name_checked_at_the_handler",
        in_hook("try:\n    x = 1\nexcept KeyError as eval:\n    x = 2"),
        [
            (
                "banned_name",
                "`eval` is not allowed in hooks, not even as a variable: "
                "hooks cannot run generated code",
                4,
                5,
            )
        ],
    ),
    (
        "except_type_of_60_chars_in_full_and_longer_cut_to_57_and_dots",
        in_hook(
            f"try:\n    x = 1\nexcept ctx.{'a' * 56}:\n    x = 2\nexcept ctx.{'b' * 57}:\n    x = 3"
        ),
        [
            ("except_type", except_type("ctx." + "a" * 56), 4, 16),
            ("except_type", except_type("ctx." + "b" * 53 + "..."), 6, 16),
        ],
    ),
    (
        "except_type_that_cannot_be_unparsed_is_named_by_its_node_type",
        in_hook("try:\n    x = 1\nexcept " + "-" * 900 + "1:\n    x = 2"),
        [
            ("too_many_nodes", "hook has 1816 syntax nodes; the limit is 1200: simplify it", 1, 1),
            ("except_type", except_type("UnaryOp"), 4, 12),
        ],
    ),
    (
        "banned_and_private_names_are_not_also_unknown",
        in_hook("return eval('1') + os + _x + iter"),
        [
            (
                "banned_name",
                "`eval` is not allowed in hooks, not even as a variable: "
                "hooks cannot run generated code",
                2,
                12,
            ),
            ("banned_module", MODULE.format("os"), 2, 24),
            ("private_name", private("_x"), 2, 29),
            (
                "banned_name",
                "`iter` is not allowed in hooks, not even as a variable: "
                "iter(f, sentinel) is an unbounded loop; use a for loop over a list",
                2,
                34,
            ),
        ],
    ),
    (
        "names_in_every_binding_position",
        "def sys(ctx, _p):\n    return None\n" + in_hook("for _i in []:\n    pass"),
        [
            ("banned_module", MODULE.format("sys"), 1, 1),
            ("private_name", private("_p"), 1, 14),
            ("private_name", private("_i"), 4, 9),
        ],
    ),
    (
        "a_name_twice_on_one_line_once_at_its_first_column",
        in_hook("a = foo + bar + foo\nb = foo"),
        [
            ("unknown_name", unknown("foo"), 2, 9),
            ("unknown_name", unknown("bar"), 2, 15),
            ("unknown_name", unknown("foo"), 3, 9),
        ],
    ),
    (
        "a_bomb_twice_on_one_line_once_at_its_first_column",
        in_hook("return 10**10 + 2**40 + (-10)**10"),
        [("literal_bomb", BOMB_POWER, 2, 12)],
    ),
    (
        "attributes_private_banned_and_internal",
        in_hook(
            "return ctx._d + ctx.format + ctx.format_map + ctx.mro + ctx.im_func"
            " + ctx.im_self + ctx.f_back"
        ),
        [
            ("private_attribute", private_attr("_d"), 2, 16),
            ("banned_attribute", f"attribute `.format` is not allowed: {FORMAT_HINT}", 2, 25),
            ("banned_attribute", f"attribute `.format_map` is not allowed: {FORMAT_HINT}", 2, 38),
            (
                "banned_attribute",
                "attribute `.mro` is not allowed: introspection is not available in hooks",
                2,
                55,
            ),
            ("banned_attribute", f"attribute `.im_func` is not allowed: {INTERNALS}", 2, 65),
            ("banned_attribute", f"attribute `.im_self` is not allowed: {INTERNALS}", 2, 79),
            ("banned_attribute", f"attribute `.f_back` is not allowed: {INTERNALS}", 2, 93),
        ],
    ),
    (
        "attribute_split_over_lines_points_at_the_attribute",
        "def hook(ctx, state):\n    return (ctx.\ngi_frame)\n",
        [("banned_attribute", f"attribute `.gi_frame` is not allowed: {INTERNALS}", 3, 1)],
    ),
    (
        "attribute_assignment_and_deletion",
        in_hook("ctx.a = 1\ndel ctx.b\nctx._c = 1"),
        [
            (
                "attribute_assignment",
                "assigning or deleting attributes (`.a`) is not allowed: keep data in `state` "
                "or in a dict",
                2,
                9,
            ),
            (
                "attribute_assignment",
                "assigning or deleting attributes (`.b`) is not allowed: keep data in `state` "
                "or in a dict",
                3,
                13,
            ),
            ("private_attribute", private_attr("_c"), 4, 9),
            (
                "attribute_assignment",
                "assigning or deleting attributes (`._c`) is not allowed: keep data in `state` "
                "or in a dict",
                4,
                9,
            ),
        ],
    ),
    (
        "module_attributes_list_what_the_module_offers",
        in_hook("return re.foo + math.bar + re._x + math.sqrt(1) + re.sub + ctx.foo"),
        [
            (
                "unknown_module_attribute",
                "`re.foo` is not available; re offers: " + ", ".join(sorted(RE_EXPORTS)),
                2,
                15,
            ),
            (
                "unknown_module_attribute",
                "`math.bar` is not available; math offers: " + ", ".join(sorted(MATH_EXPORTS)),
                2,
                26,
            ),
            ("private_attribute", private_attr("_x"), 2, 35),
        ],
    ),
    (
        "private_keyword_at_the_keyword",
        in_hook("return dict(_a=1, b=2, **ctx)"),
        [("private_name", private("_a"), 2, 17)],
    ),
    (
        "match_patterns",
        in_hook(
            "match ctx:\n    case [*_r]:\n        return 1\n    case {**_m}:\n        return 2\n"
            "    case str(_p=1, format=2, gi_x=3, ok=4):\n        return 3\n"
            "    case _x:\n        return 4"
        ),
        [
            ("private_name", private("_r"), 3, 15),
            ("private_name", private("_m"), 5, 14),
            ("private_attribute", private_attr("_p"), 7, 14),
            ("banned_attribute", f"attribute `.format` is not allowed: {FORMAT_HINT}", 7, 14),
            ("banned_attribute", f"attribute `.gi_x` is not allowed: {INTERNALS}", 7, 14),
            ("private_name", private("_x"), 9, 14),
        ],
    ),
    (
        "string_too_long",
        in_hook(f"return 'ok' + '{'x' * 2001}'"),
        [("string_too_long", "string literal of 2001 characters; the limit is 2000", 2, 19)],
    ),
    (
        "power_bomb",
        in_hook("x = 1\nreturn 10**10"),
        [("literal_bomb", BOMB_POWER, 3, 12)],
    ),
    (
        "repeat_bomb",
        in_hook("return [0] * 100001"),
        [("literal_bomb", BOMB_REPEAT, 2, 12)],
    ),
    (
        "range_bomb",
        in_hook("return range(100001)"),
        [("literal_bomb", BOMB_RANGE, 2, 12)],
    ),
]


@pytest.mark.parametrize(("name", "source", "expected"), EXACT, ids=[e[0] for e in EXACT])
def test_violation_says_exactly_what_and_where(
    name: str, source: str, expected: list[Found]
) -> None:
    assert found(source) == expected


def test_syntax_errors_carry_the_parser_message_and_position() -> None:
    source = "def hook(ctx, state):\n    x = 1\n    return )\n"
    assert found(source) == [("syntax_error", "syntax error: unmatched ')'", 3, 12)]


def test_syntax_errors_without_a_position_are_placed_at_the_start_of_their_line() -> None:
    null_byte = "def hook(ctx, state):\n    return '\x00'\n"
    assert found(null_byte) == [
        ("syntax_error", "syntax error: source code string cannot contain null bytes", 1, 1)
    ]
    ((code, message, line, col),) = found(in_hook("return " + "1" * 5000))
    assert (code, line, col) == ("syntax_error", 2, 1)
    assert message.startswith("syntax error: Exceeds the limit (4300 digits)")


def test_parser_crash_is_a_syntax_error_at_the_start() -> None:
    ((code, message, line, col),) = found(in_hook("return " + "-" * 3000 + "1"))
    assert (code, line, col) == ("syntax_error", 1, 1)
    assert message.startswith("syntax error: RecursionError: ")


# -- the limits, each at its boundary ----------------------------------------------------


def test_source_length_limit_is_inclusive() -> None:
    limits = StaticLimits(max_source_chars=60)
    exact = in_hook("return 1")
    exact = exact + "#" * (60 - len(exact))
    assert len(exact) == 60 and found(exact, limits) == []
    assert found(exact + "#", limits) == [
        ("source_too_long", "hook source is 61 characters; the limit is 60: shorten it", 1, 1)
    ]


def test_source_too_long_stops_at_the_length() -> None:
    limits = StaticLimits(max_source_chars=30)
    source = in_hook("import os\nwhile True:\n    pass")
    violations, stats = check_source(source, "pre_action", limits)
    assert violations == [
        Violation(
            code=Code.SOURCE_TOO_LONG,
            message=f"hook source is {len(source)} characters; the limit is 30: shorten it",
            hook="pre_action",
            line=1,
            col=1,
        )
    ]
    assert stats == HookStats(chars=len(source), lines=5)


def test_node_limit_is_inclusive() -> None:
    source = in_hook("return 1")
    _, stats = check_source(source, "pre_action")
    assert stats.nodes == 7
    assert found(source, StaticLimits(max_nodes=7)) == []
    assert found(source, StaticLimits(max_nodes=6)) == [
        ("too_many_nodes", "hook has 7 syntax nodes; the limit is 6: simplify it", 1, 1)
    ]


def test_string_limit_is_inclusive_and_counts_characters() -> None:
    limits = StaticLimits(max_string_literal=3)
    assert found(in_hook("return 'abc' + b'xyz'"), limits) == []
    assert found(in_hook("return 'ab' + 'abcd'"), limits) == [
        ("string_too_long", "string literal of 4 characters; the limit is 3", 2, 19)
    ]


def test_helper_limit_is_inclusive_and_counts_nested_helpers() -> None:
    two = "def a():\n    return 1\n" + in_hook("def b():\n    return 2\nreturn a() + b()")
    assert found(two, StaticLimits(max_helpers=2)) == []
    assert found(two, StaticLimits(max_helpers=1)) == [
        ("too_many_helpers", "2 helper functions besides hook; the limit is 1", 1, 1)
    ]
    no_hook = "def a():\n    return 1\n"
    assert ("too_many_helpers", "1 helper functions besides hook; the limit is 0", 1, 1) in (
        found(no_hook, StaticLimits(max_helpers=0))
    )
    assert found(in_hook("return 1"), StaticLimits(max_helpers=0)) == []


def test_a_second_hook_counts_as_a_helper() -> None:
    helpers = "".join(f"def h{i}():\n    return {i}\n" for i in range(3))
    source = helpers + in_hook("return h0()") + in_hook("return h1() + h2()")
    assert found(source) == [
        ("too_many_helpers", "4 helper functions besides hook; the limit is 3", 1, 1),
        ("duplicate_hook", "`hook` is defined more than once at top level; define it once", 9, 1),
    ]


def test_power_limit_counts_the_limit_itself() -> None:
    assert found(in_hook("return 10**8 + (-10)**8 + 31622**2")) == []
    assert found(in_hook("return 10**9")) == [("literal_bomb", BOMB_POWER, 2, 12)]
    assert found(in_hook("return (-10)**9")) == [("literal_bomb", BOMB_POWER, 2, 12)]
    assert found(in_hook("return 31623**2")) == [("literal_bomb", BOMB_POWER, 2, 12)]
    assert found(in_hook("return 2**40")) == [("literal_bomb", BOMB_POWER, 2, 12)]
    tight = StaticLimits(max_power_result=100)
    assert found(in_hook("return 9**2"), tight) == []
    assert found(in_hook("return 10**2"), tight) == [
        ("literal_bomb", "this literal power is too large for a hook (limit 100)", 2, 12)
    ]


def test_powers_that_stay_small_are_not_bombs() -> None:
    assert found(in_hook("return 2**-100 + 1**10**8 + (-1)**10**8 + 0**10**8 + 7**0")) == []


def test_repetition_limit_is_inclusive_on_both_sides() -> None:
    assert found(in_hook("return [0] * 100000 + 100000 * 'ab' + (0,) * 100000")) == []
    for expression in (
        "[0] * 100001",
        "100001 * [0]",
        "(0,) * 10**6",
        "'ab' * 100001",
        "b'a' * 100001",
        "f'{ctx}' * 100001",
        "[0] * +1000000",
        "[0] * --1000000",
        "[0] * (1000 * 1000)",
    ):
        assert found(in_hook(f"return {expression}")) == [("literal_bomb", BOMB_REPEAT, 2, 12)], (
            expression
        )
    # too large to fold is too large: the inner power is reported as well
    assert found(in_hook("return [0] * (10**10**10)")) == [
        ("literal_bomb", BOMB_REPEAT, 2, 12),
        ("literal_bomb", BOMB_POWER, 2, 19),
    ]
    tight = StaticLimits(max_literal_count=10)
    assert found(in_hook("return [0] * 10"), tight) == []
    assert found(in_hook("return [0] * 11"), tight) == [
        ("literal_bomb", "this literal repetition is too large for a hook (limit 10)", 2, 12)
    ]


def test_nested_repetition_counts_the_copies_it_builds() -> None:
    assert found(in_hook("return [0] * 100 * 1000 + 10 * ('ab' * 10000) + ['-' * 80] * 2")) == []
    assert found(in_hook("return [0] * -1000000 * -1")) == []  # an empty list, repeated
    for expression in (
        "'a' * 100000 * 100000",
        "[0] * 1001 * 100",
        "100 * ('a' * 1001)",
        "2 * (3 * [0] * 20000)",
        "('a' * 10) * (10**10**10)",
    ):
        violations = found(in_hook(f"return {expression}"))
        assert violations[0] == ("literal_bomb", BOMB_REPEAT, 2, 12), expression
    assert found(in_hook("n = 2\nreturn ('a' * n) * 100000 + 'a' * 100000 * n")) == []


def test_repetition_counting_is_bounded_to_nine_factors() -> None:
    # bounded work per node: nine factors are counted, a longer chain only by its parts
    # (each sub-product is checked on its own; 2**17 copies in 2s slip through)
    tight = StaticLimits(max_literal_count=500)
    assert found(in_hook("return [0]" + " * 2" * 9), tight) == [
        ("literal_bomb", "this literal repetition is too large for a hook (limit 500)", 2, 12)
    ]
    assert found(in_hook("return [0]" + " * 2" * 17)) == []


def test_repetition_by_values_is_left_to_the_worker() -> None:
    assert (
        found(in_hook("n = 10\nreturn [0] * -1000000 + [0] * n + 2 * 10**6 + [0] * len(ctx)")) == []
    )


def test_range_limit_is_inclusive_for_every_argument() -> None:
    assert found(in_hook("return range(100000), range(-100000, 100000, 3)")) == []
    for expression in (
        "range(100001)",
        "range(-100001)",
        "range(0, 100001)",
        "range(0, 10, 10**6)",
    ):
        assert found(in_hook(f"return {expression}")) == [("literal_bomb", BOMB_RANGE, 2, 12)], (
            expression
        )
    assert found(in_hook("return range(10**10**10)")) == [
        ("literal_bomb", BOMB_RANGE, 2, 12),
        ("literal_bomb", BOMB_POWER, 2, 18),
    ]
    assert found(in_hook("return ctx.range(10**6) + len(10**6)")) == []
    tight = StaticLimits(max_literal_count=10)
    assert found(in_hook("return range(10)"), tight) == []
    assert found(in_hook("return range(11)"), tight) == [
        ("literal_bomb", "this literal range is too large for a hook (limit 10)", 2, 12)
    ]


def test_literal_folding_depth_is_bounded_and_what_is_not_folded_is_too_large() -> None:
    # 8 unary operators are folded: 2**40 is over the limit, 2**20 is not
    assert found(in_hook("return 2 ** ++++++++40")) == [("literal_bomb", BOMB_POWER, 2, 12)]
    assert found(in_hook("return 2 ** ++++++++20")) == []
    # a literal hidden deeper is not folded, and an unfoldable int-literal power is a bomb
    for expression in (
        "9 ** +++++++++999999999",
        "(+++++++++9) ** 999999999",
        "9 ** ---------999999999",
    ):
        assert found(in_hook(f"return {expression}")) == [("literal_bomb", BOMB_POWER, 2, 12)], (
            expression
        )
    # a computed exponent is refused whatever it looks like
    assert [c for c, *_ in found(in_hook("return 2 ** +++++++++ctx['n']"))] == ["computed_exponent"]


# -- stats and the patch report ------------------------------------------------------------


def test_hook_stats_count_the_source() -> None:
    source = "def h():\n    return 'abcd'\n" + in_hook("def g():\n    return b'xy'\nreturn h()")
    violations, stats = check_source(source, "pre_action")
    assert violations == []
    assert stats == HookStats(chars=len(source), lines=7, nodes=17, helpers=2, longest_string=4)
    assert check_source("", "pre_action")[1] == HookStats(chars=0, lines=1, nodes=1)
    syntax = "def hook(ctx, state):\n    return (\n"
    assert check_source(syntax, "pre_action")[1] == HookStats(chars=len(syntax), lines=3)


def test_patch_report_in_full() -> None:
    bad, good = in_hook("return foo + bar"), in_hook("return {}")
    patch = Patch(
        env="alfworld",
        hooks=[
            HookCode(hook=HookName.PRE_ACTION, code=bad),
            HookCode(hook=HookName.EPISODE_START, code=good),
        ],
    )
    limits = StaticLimits(max_violations_per_hook=2)
    report = check_patch(patch, limits)
    assert report == StaticReport(
        ok=False,
        violations=[
            Violation(
                code=Code.UNKNOWN_NAME,
                message=unknown("foo"),
                hook="pre_action",
                line=2,
                col=12,
            ),
            Violation(
                code=Code.UNKNOWN_NAME,
                message=unknown("bar"),
                hook="pre_action",
                line=2,
                col=18,
            ),
        ],
        stats={
            "pre_action": HookStats(chars=len(bad), lines=3, nodes=12),
            "episode_start": HookStats(chars=len(good), lines=3, nodes=7),
        },
        limits={
            "max_source_chars": 8000,
            "max_nodes": 1200,
            "max_string_literal": 2000,
            "max_helpers": 3,
            "max_power_result": 10**9,
            "max_literal_count": 100_000,
            "max_violations_per_hook": 2,
        },
        truncated=False,
    )
    assert report.codes() == ["unknown_name"]


def test_violations_beyond_the_cap_are_cut_per_hook() -> None:
    patch = Patch(
        env="alfworld",
        hooks=[
            HookCode(hook=HookName.PRE_ACTION, code=in_hook("return a + b + c")),
            HookCode(hook=HookName.POST_FEEDBACK, code=in_hook("return d")),
        ],
    )
    report = check_patch(patch, StaticLimits(max_violations_per_hook=2))
    assert report.truncated
    assert [(v.hook, v.message) for v in report.violations] == [
        ("pre_action", unknown("a")),
        ("pre_action", unknown("b")),
        ("post_feedback", unknown("d")),
    ]
    assert check_patch(patch, StaticLimits(max_violations_per_hook=3)).truncated is False


def test_patch_is_checked_with_its_limits() -> None:
    patch = Patch(
        env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, code=in_hook("return 'abcd'"))]
    )
    report = check_patch(patch, StaticLimits(max_string_literal=3))
    assert [(v.code, v.message) for v in report.violations] == [
        (Code.STRING_TOO_LONG, "string literal of 4 characters; the limit is 3")
    ]
    assert report.limits["max_string_literal"] == 3


def test_good_patch_report_is_ok_with_default_limits() -> None:
    source = in_hook("return 1")
    patch = Patch(env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, code=source)])
    report = check_patch(patch)
    assert report.ok and report.violations == [] and not report.truncated
    assert report.limits["max_nodes"] == 1200 and report.limits["max_violations_per_hook"] == 50
    assert report.stats == {"pre_action": HookStats(chars=len(source), lines=3, nodes=7)}
