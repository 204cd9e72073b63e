"""Static checks: every rule rejects with its stable code, good patches pass, never raises."""

from __future__ import annotations

import builtins
import json
import random
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness_r1.cli.jobs.patch_check import check_file
from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.sandbox import hooklib
from harness_r1.sandbox.hooklib import (
    ALLOWED_BUILTINS,
    MATH_EXPORTS,
    RE_EXPORTS,
    Namespace,
    closest,
    hook_globals,
    similarity,
)
from harness_r1.sandbox.static import check_patch, check_source
from harness_r1.sandbox.static_codes import BANNED_MODULES, BANNED_NAMES, Code
from harness_r1.sandbox.static_report import HookStats, StaticLimits, StaticReport, Violation


def in_hook(body: str) -> str:
    return "def hook(ctx, state):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "\n"


def codes_of(source: str, limits: StaticLimits | None = None) -> set[str]:
    violations, _ = check_source(source, "pre_action", limits)
    return {str(v.code) for v in violations}


# -- the DESIGN's known escapes and the issue's list, each with its code ---------------------

ESCAPES: list[tuple[str, str, str]] = [
    ("format_dunder", in_hook("return '{0.__class__}'.format(ctx)"), "banned_attribute"),
    ("format_map", in_hook("return '{a.__class__}'.format_map({'a': ctx})"), "banned_attribute"),
    (
        "generator_frame_walk",
        in_hook("g = (g.gi_frame.f_back.f_back.f_globals for x in [1])\nreturn None"),
        "banned_attribute",
    ),
    (
        "subclasses_walk",
        in_hook("return ().__class__.__bases__[0].__subclasses__()"),
        "private_attribute",
    ),
    ("getattr_split", in_hook("return getattr(ctx, '__cl' + 'ass__')"), "banned_name"),
    ("while_true", in_hook("while True:\n    pass"), "banned_while"),
    ("import_os", in_hook("import os\nreturn os.getcwd()"), "banned_import"),
    ("from_import", in_hook("from os import system"), "banned_import"),
    ("import_top_level", "import os\n" + in_hook("return None"), "banned_import"),
    ("dunder_import", in_hook("return __import__('os')"), "banned_name"),
    ("lambda", in_hook("f = lambda: 0\nreturn f()"), "banned_lambda"),
    ("class_def", in_hook("class A:\n    pass"), "banned_class"),
    ("with_open", in_hook("with open('x') as f:\n    pass"), "banned_with"),
    ("raise", in_hook("raise SystemExit"), "banned_raise"),
    ("global", in_hook("global x\nx = 1"), "banned_global"),
    ("async_def", "async def f():\n    pass\n" + in_hook("return None"), "banned_async"),
    ("yield", in_hook("yield 1"), "banned_yield"),
    ("format_call", in_hook("return 'a {}'.format(1)"), "banned_attribute"),
    ("str_format_unbound", in_hook("f = str.format\nreturn f('{}', 1)"), "banned_attribute"),
]


@pytest.mark.parametrize(("name", "source", "code"), ESCAPES, ids=[e[0] for e in ESCAPES])
def test_known_escapes_are_rejected_with_their_code(name: str, source: str, code: str) -> None:
    assert code in codes_of(source)


def test_generator_frame_walk_names_every_internal_attribute() -> None:
    violations, _ = check_source(
        in_hook("g = (g.gi_frame.f_back.f_back.f_globals for x in [1])"), "pre_action"
    )
    attrs = {re.search(r"`\.(\w+)`", v.message).group(1) for v in violations}  # type: ignore[union-attr]
    assert {"gi_frame", "f_back", "f_globals"} <= attrs


# -- every rule: a rejecting case with its stable code ---------------------------------------

RULES: list[tuple[str, str, str]] = [
    ("syntax", "def hook(ctx, state):\n    return (\n", "syntax_error"),
    ("syntax_null_byte", "def hook(ctx, state):\n    return '\x00'\n", "syntax_error"),
    (
        "nonlocal",
        in_hook("n = 1\ndef f():\n    nonlocal n\n    n = 2\nf()"),
        "banned_global",
    ),
    ("await", "async def f(x):\n    await x\n" + in_hook("return None"), "banned_async"),
    (
        "async_for",
        "async def f(x):\n    async for a in x:\n        pass\n" + in_hook("return None"),
        "banned_async",
    ),
    (
        "async_with",
        "async def f(x):\n    async with x:\n        pass\n" + in_hook("return None"),
        "banned_async",
    ),
    (
        "async_comprehension",
        "async def f(x):\n    return [a async for a in x]\n" + in_hook("return None"),
        "banned_async",
    ),
    ("async_hook", "async def hook(ctx, state):\n    return None\n", "banned_async"),
    ("yield_from", in_hook("yield from [1]"), "banned_yield"),
    ("bare_except", in_hook("try:\n    x = 1\nexcept:\n    x = 2"), "bare_except"),
    ("except_exception", in_hook("try:\n    x = 1\nexcept Exception:\n    x = 2"), "except_type"),
    ("except_base", in_hook("try:\n    x = 1\nexcept BaseException:\n    x = 2"), "except_type"),
    (
        "except_in_tuple",
        in_hook("try:\n    x = 1\nexcept (ValueError, MemoryError):\n    x = 2"),
        "except_type",
    ),
    (
        "except_recursion",
        in_hook("try:\n    x = 1\nexcept RecursionError:\n    x = 2"),
        "except_type",
    ),
    (
        "finally",
        in_hook("try:\n    x = 1\nexcept ValueError:\n    x = 2\nfinally:\n    x = 3"),
        "banned_finally",
    ),
    ("try_star", in_hook("try:\n    x = 1\nexcept* ValueError:\n    x = 2"), "banned_try_star"),
    ("private_local", in_hook("_x = 1\nreturn _x"), "private_name"),
    ("private_param", "def hook(ctx, _state):\n    return None\n", "private_name"),
    ("private_helper", "def _h():\n    return 1\n" + in_hook("return _h()"), "private_name"),
    ("private_keyword", in_hook("return dict(_a=1)"), "private_name"),
    (
        "private_except_name",
        in_hook("try:\n    x = 1\nexcept ValueError as _e:\n    x = 2"),
        "private_name",
    ),
    ("dunder_builtins", in_hook("return __builtins__"), "banned_name"),
    ("dunder_name", in_hook("return __name__"), "private_name"),
    ("private_attribute", in_hook("return ctx._data"), "private_attribute"),
    ("dunder_dict", in_hook("return similarity.__globals__"), "private_attribute"),
    ("eval", in_hook("return eval('1')"), "banned_name"),
    ("exec", in_hook("exec('x = 1')"), "banned_name"),
    ("compile", in_hook("return compile('1', 'f', 'eval')"), "banned_name"),
    ("open", in_hook("return open('/etc/passwd').read()"), "banned_name"),
    ("setattr", in_hook("setattr(ctx, 'a', 1)"), "banned_name"),
    ("delattr", in_hook("delattr(ctx, 'a')"), "banned_name"),
    ("hasattr", in_hook("return hasattr(ctx, 'a')"), "banned_name"),
    ("type", in_hook("return type(ctx)"), "banned_name"),
    ("type_as_variable", in_hook("type = ctx['task']['task_type']\nreturn type"), "banned_name"),
    ("vars", in_hook("return vars()"), "banned_name"),
    ("globals", in_hook("return globals()"), "banned_name"),
    ("locals", in_hook("return locals()"), "banned_name"),
    ("dir", in_hook("return dir(ctx)"), "banned_name"),
    ("object", in_hook("return object()"), "banned_name"),
    ("super", in_hook("return super()"), "banned_name"),
    ("print", in_hook("print(ctx)"), "banned_name"),
    ("input", in_hook("return input()"), "banned_name"),
    ("breakpoint", in_hook("breakpoint()"), "banned_name"),
    ("exit", in_hook("exit(0)"), "banned_name"),
    ("iter_sentinel", in_hook("for x in iter(int, 1):\n    pass"), "banned_name"),
    ("bytearray", in_hook("return bytearray(10)"), "banned_name"),
    ("memoryview", in_hook("return memoryview(b'x')"), "banned_name"),
    ("module_os", in_hook("return os.system('id')"), "banned_module"),
    ("module_sys", in_hook("return sys.modules"), "banned_module"),
    ("module_builtins", in_hook("return builtins"), "banned_module"),
    ("module_subprocess", in_hook("return subprocess"), "banned_module"),
    ("module_as_variable", in_hook("signal = 1\nreturn signal"), "banned_module"),
    ("unknown_name", in_hook("return foo(ctx)"), "unknown_name"),
    ("unknown_exception", in_hook("return SystemExit"), "unknown_name"),
    ("unknown_id", in_hook("return id(ctx)"), "unknown_name"),
    ("re_enum_sys", in_hook("return re.enum.sys"), "unknown_module_attribute"),
    ("re_functools", in_hook("return re.functools"), "unknown_module_attribute"),
    ("math_factorial", in_hook("return math.factorial(100000)"), "unknown_module_attribute"),
    ("attribute_store", in_hook("similarity.cache = {}"), "attribute_assignment"),
    ("attribute_del", in_hook("del closest.x"), "attribute_assignment"),
    ("attr_mro", in_hook("return str.mro()"), "banned_attribute"),
    ("attr_tb_frame", in_hook("return ctx.tb_frame"), "banned_attribute"),
    ("attr_tb_next", in_hook("return ctx.tb_next"), "banned_attribute"),
    ("attr_co_code", in_hook("return ctx.co_code"), "banned_attribute"),
    ("attr_co_consts", in_hook("return ctx.co_consts"), "banned_attribute"),
    ("attr_gi_code", in_hook("return ctx.gi_code"), "banned_attribute"),
    ("attr_gi_yieldfrom", in_hook("return ctx.gi_yieldfrom"), "banned_attribute"),
    ("attr_cr_frame", in_hook("return ctx.cr_frame"), "banned_attribute"),
    ("attr_ag_frame", in_hook("return ctx.ag_frame"), "banned_attribute"),
    ("attr_f_builtins", in_hook("return ctx.f_builtins"), "banned_attribute"),
    ("attr_func_globals", in_hook("return hook.func_globals"), "banned_attribute"),
    (
        "match_class_dunder",
        in_hook("match ctx:\n    case str(__class__=c):\n        return c"),
        "private_attribute",
    ),
    (
        "match_class_frame",
        in_hook("match ctx:\n    case str(gi_frame=c):\n        return c"),
        "banned_attribute",
    ),
    (
        "match_rest_private",
        in_hook("match ctx:\n    case {'a': 1, **_rest}:\n        return 1"),
        "private_name",
    ),
    (
        "match_capture_private",
        in_hook("match ctx:\n    case [_x]:\n        return 1"),
        "private_name",
    ),
    ("bomb_str_pow", in_hook("return 'a' * 10**10"), "literal_bomb"),
    ("bomb_pow_tower", in_hook("return 9**9**9"), "literal_bomb"),
    ("bomb_pow", in_hook("return 10**10"), "literal_bomb"),
    ("bomb_list_repeat", in_hook("return [0] * 1000000"), "literal_bomb"),
    ("bomb_repeat_left", in_hook("return 1000000 * 'ab'"), "literal_bomb"),
    ("bomb_range", in_hook("for i in range(10**12):\n    pass"), "literal_bomb"),
    ("bomb_range_plain", in_hook("for i in range(0, 1000000000):\n    pass"), "literal_bomb"),
    ("bomb_range_huge_fold", in_hook("for i in range(10**10**10):\n    pass"), "literal_bomb"),
    ("top_level_assign", "X = 1\n" + in_hook("return X"), "top_level_statement"),
    ("top_level_call", in_hook("return None") + "hook({}, {})\n", "top_level_statement"),
    ("top_level_if", "if True:\n    pass\n" + in_hook("return None"), "top_level_statement"),
    ("late_docstring", in_hook("return None") + "'not a docstring'\n", "top_level_statement"),
    (
        "decorator_helper",
        "@h\ndef g():\n    return 1\n" + in_hook("return None"),
        "banned_decorator",
    ),
    (
        "decorator_hook",
        "def h(f):\n    return f\n@h\n" + in_hook("return None"),
        "banned_decorator",
    ),
    ("missing_hook", "def helper(ctx, state):\n    return None\n", "missing_hook"),
    ("empty_source", "", "missing_hook"),
    ("docstring_only", "'''Nothing.'''\n", "missing_hook"),
    ("duplicate_hook", in_hook("return None") + in_hook("return 1"), "duplicate_hook"),
    ("sig_one_param", "def hook(ctx):\n    return None\n", "bad_signature"),
    ("sig_three_params", "def hook(ctx, state, extra):\n    return None\n", "bad_signature"),
    ("sig_default", "def hook(ctx, state=None):\n    return None\n", "bad_signature"),
    ("sig_varargs", "def hook(ctx, *state):\n    return None\n", "bad_signature"),
    ("sig_kwargs", "def hook(ctx, state, **kw):\n    return None\n", "bad_signature"),
    ("sig_kwonly", "def hook(ctx, state, *, k):\n    return None\n", "bad_signature"),
    ("sig_kwonly_only", "def hook(*, ctx, state):\n    return None\n", "bad_signature"),
]


@pytest.mark.parametrize(("name", "source", "code"), RULES, ids=[r[0] for r in RULES])
def test_rule_rejects_with_stable_code(name: str, source: str, code: str) -> None:
    assert code in codes_of(source)


def test_size_limits() -> None:
    limits = StaticLimits()
    long_string = in_hook(f"return {'x' * (limits.max_string_literal + 1)!r}")
    assert codes_of(long_string) == {"string_too_long"}
    # implicit concatenation is one literal
    halves = "'" + "y" * 1200 + "' '" + "y" * 1200 + "'"
    assert "string_too_long" in codes_of(in_hook(f"return ({halves})"))
    # bytes and f-string parts count too
    assert "string_too_long" in codes_of(in_hook(f"return b'{'z' * 2001}'"))
    assert "string_too_long" in codes_of(in_hook(f"return f'{'z' * 2001}{{ctx}}'"))

    too_long = in_hook("x = 1\n" * 2000)
    violations, stats = check_source(too_long, "pre_action")
    assert [v.code for v in violations] == [Code.SOURCE_TOO_LONG]
    assert stats.chars == len(too_long) > limits.max_source_chars

    many_nodes = in_hook("return " + "+".join(["1"] * 700))
    assert len(many_nodes) < limits.max_source_chars
    violations, stats = check_source(many_nodes, "pre_action")
    assert Code.TOO_MANY_NODES in {v.code for v in violations}
    assert stats.nodes > limits.max_nodes

    helpers = "".join(f"def h{i}():\n    return {i}\n" for i in range(4))
    assert "too_many_helpers" in codes_of(helpers + in_hook("return h0()"))
    three = "".join(f"def h{i}():\n    return {i}\n" for i in range(3))
    assert codes_of(three + in_hook("return h0() + h1() + h2()")) == set()
    nested = in_hook(
        "def a():\n    return 1\ndef b():\n    return 2\n"
        "def c():\n    return 3\ndef d():\n    return 4\nreturn a()"
    )
    assert "too_many_helpers" in codes_of(nested)


def test_limits_are_configurable() -> None:
    tight = StaticLimits(max_source_chars=40, max_nodes=5, max_string_literal=3, max_helpers=0)
    assert codes_of(in_hook("return 'abcd'"), tight) == {"too_many_nodes", "string_too_long"}
    assert codes_of("def h():\n    return 1\n" + in_hook("return h()"), tight) == {
        "source_too_long"
    }
    assert "too_many_helpers" in codes_of(
        "def h():\n    return 1\n" + in_hook("return h()"), StaticLimits(max_helpers=0)
    )


def test_syntax_error_carries_its_line() -> None:
    violations, _ = check_source("def hook(ctx, state):\n    x = 1\n    return )\n", "pre_action")
    assert [v.code for v in violations] == [Code.SYNTAX_ERROR]
    assert violations[0].line == 3
    assert violations[0].hook == "pre_action"


def test_violation_positions_are_one_based_and_point_at_the_attribute() -> None:
    violations, _ = check_source(in_hook("x = 1\nreturn ctx.gi_frame"), "pre_action")
    (violation,) = violations
    assert (violation.line, violation.col) == (3, 16)  # `    return ctx.gi_frame`


def test_duplicates_on_one_line_are_reported_once_and_per_line_otherwise() -> None:
    violations, _ = check_source(in_hook("a = foo + foo\nb = foo"), "pre_action")
    assert [(v.code, v.line) for v in violations] == [
        (Code.UNKNOWN_NAME, 2),
        (Code.UNKNOWN_NAME, 3),
    ]


def test_messages_are_stable_and_teach_the_fix() -> None:
    violations, _ = check_source(in_hook("while True:\n    pass"), "pre_action")
    assert violations[0].message == (
        "`while` loops are not allowed: use `for` over a bounded range or list"
    )
    violations, _ = check_source(in_hook("return type(ctx)"), "pre_action")
    assert "isinstance" in violations[0].message
    violations, _ = check_source(in_hook("return foo"), "pre_action")
    assert "similarity" in violations[0].message and "isinstance" in violations[0].message


# -- what is allowed ---------------------------------------------------------------------

ALLOWED: list[tuple[str, str]] = [
    ("throwaway_underscore", in_hook("for _ in range(3):\n    pass")),
    ("genexp", in_hook("return any(a in ctx['observation'] for a in ['x', 'y'])")),
    ("assert", in_hook("assert isinstance(ctx, dict), 'ctx'\nreturn None")),
    ("del_name", in_hook("x = 1\ndel x\nd = {'a': 1}\ndel d['a']")),
    ("fstring_conversions", in_hook("x = 1.5\nreturn f'{x!r} {x!s} {x:>{8}.2f}'")),
    ("percent_format", in_hook("return 'step %d' % ctx['step']")),
    (
        "match",
        in_hook(
            "match ctx['env']:\n    case 'dbbench':\n        return 'sql'\n"
            "    case _:\n        return None"
        ),
    ),
    ("match_class", in_hook("match ctx:\n    case {'step': int(n)}:\n        return str(n)")),
    (
        "match_binds_rest_and_star",
        in_hook(
            "match ctx:\n    case {'a': 1, **rest}:\n        return rest\n"
            "    case [first, *others]:\n        return [first, others]"
        ),
    ),
    (
        "try_named",
        in_hook(
            "try:\n    n = int(ctx['x'])\n"
            "except (ValueError, KeyError, re.error) as err:\n    n = len(err.args)\n"
            "else:\n    n += 1\nreturn n"
        ),
    ),
    ("walrus", in_hook("if (m := re.search('a', ctx['observation'])):\n    return m.group(0)")),
    ("star_args", in_hook("return max(*[1, 2], **{})")),
    ("nested_helper", in_hook("def inner(x):\n    return x\nreturn inner(1)")),
    ("docstring", "'''Module doc.'''\n" + in_hook("'''Hook doc.'''\nreturn None")),
    ("posonly_signature", "def hook(ctx, state, /):\n    return None\n"),
    ("other_param_names", "def hook(c, s):\n    return c['step']\n"),
    ("annotations", "def hook(ctx: dict, state: dict) -> None:\n    return None\n"),
    ("math_and_re", in_hook("return math.sqrt(4) + len(re.findall(r'\\d', 'a1', re.I))")),
    (
        "small_powers",
        in_hook("best = 10**8\nreturn [0] * 100 + ['-' * 80] * 2 + list(range(1000))"),
    ),
    ("negative_and_float", in_hook("return (-2) ** 3 + 2.0 ** 100 + 2 ** -1")),
    ("local_id", in_hook("id = ctx['step']\nreturn id")),
]


@pytest.mark.parametrize(("name", "source"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_allowed_constructs_pass(name: str, source: str) -> None:
    violations, _ = check_source(source, "pre_action")
    assert violations == [], [v.message for v in violations]


# -- realistic good patches: pass statically and really work with the worker's globals -----

SNAP_TO_ADMISSIBLE = '''\
"""Snap the proposed action to the closest admissible command (ALFWorld)."""


def hook(ctx, state):
    options = ctx.get("admissible_actions") or []
    proposed = (ctx.get("proposed_action") or "").strip()
    if not options or proposed in options:
        return None
    best = closest(proposed, options, 0.3)
    if best is None:
        listed = ", ".join(options[:15])
        text = f"'{proposed}' is not a valid action. Choose one of: {listed}"
        return {"effect": "veto", "text": text}
    return {"effect": "rewrite", "text": best}
'''

VETO_REPEATED_SQL = """\
def normalise(sql):
    return re.sub(r"\\s+", " ", sql.strip().rstrip(";")).lower()


def hook(ctx, state):
    proposed = ctx.get("proposed_action") or ""
    if not re.match(r"^\\s*(select|insert|update|delete)\\b", proposed, re.I):
        return None
    key = normalise(proposed)
    seen = state.setdefault("sql_seen", {})
    seen[key] = seen.get(key, 0) + 1
    previous = [normalise(h["action"]) for h in ctx["history"] if h.get("action")]
    if key in previous or seen[key] > 2:
        return {
            "effect": "veto",
            "text": "You already ran this exact SQL. Use its result, or fix the query.",
        }
    return None
"""

STUCK_HINT = """\
def hook(ctx, state):
    counters = ctx["counters"]
    if counters["nothing_happens_streak"] >= 2:
        options = ctx.get("admissible_actions") or []
        near = sorted(options, key=lambda_free_key(ctx["last_action"] or ""))[:5]
        return {"effect": "hint", "text": "Nothing happened. Try one of: " + "; ".join(near)}
    return None


def lambda_free_key(anchor):
    def key(option):
        return -similarity(anchor, option)

    return key
"""

START = """\
def hook(ctx, state):
    skills = ["Look around before acting.", "Use the exact wording of admissible actions."]
    if ctx["task"]["task_type"] == "pick_and_place":
        skills.append("Go to the object, take it, go to the target, put it.")
    return {"skills": skills, "state": {"visited": []}}
"""


def good_patch() -> Patch:
    return Patch(
        env="alfworld",
        description="snap, veto repeated SQL, hint when stuck, skills",
        hooks=[
            HookCode(hook=HookName.PRE_ACTION, code=SNAP_TO_ADMISSIBLE),
            HookCode(hook=HookName.POST_FEEDBACK, code=STUCK_HINT),
            HookCode(hook=HookName.EPISODE_START, code=START),
        ],
    )


def load_hook(source: str) -> Any:
    namespace = hook_globals()
    exec(compile(source, "<hook>", "exec"), namespace)  # trusted test code only
    return namespace["hook"]


def test_realistic_good_patches_pass() -> None:
    report = check_patch(good_patch())
    assert report.ok, [v.message for v in report.violations]
    assert set(report.stats) == {"pre_action", "post_feedback", "episode_start"}
    assert report.stats["post_feedback"].helpers == 2
    sql = Patch(env="dbbench", hooks=[HookCode(hook=HookName.PRE_ACTION, code=VETO_REPEATED_SQL)])
    assert check_patch(sql).ok


def test_good_patches_run_with_exactly_the_worker_globals() -> None:
    snap = load_hook(SNAP_TO_ADMISSIBLE)
    ctx = {
        "admissible_actions": ["go to desk 1", "open drawer 1", "look"],
        "proposed_action": "Go to the desk 1",
    }
    assert snap(ctx, {}) == {"effect": "rewrite", "text": "go to desk 1"}
    assert snap({**ctx, "proposed_action": "look"}, {}) is None

    veto = load_hook(VETO_REPEATED_SQL)
    state: dict[str, Any] = {}
    history = [{"action": "SELECT * FROM t;", "observation": "[]"}]
    result = veto({"proposed_action": "select *  from t", "history": history}, state)
    assert result["effect"] == "veto"
    assert veto({"proposed_action": "SELECT a FROM t", "history": history}, state) is None

    hint = load_hook(STUCK_HINT)
    ctx2 = {
        "counters": {"nothing_happens_streak": 2},
        "admissible_actions": ["open drawer 1", "go to desk 1"],
        "last_action": "open the drawer",
    }
    assert hint(ctx2, {})["text"].startswith("Nothing happened. Try one of: open drawer 1")

    start = load_hook(START)
    assert start({"task": {"task_type": "pick_and_place"}}, {})["state"] == {"visited": []}


def test_report_is_json_serialisable_and_lists_codes() -> None:
    patch = Patch(
        env="alfworld",
        hooks=[
            HookCode(hook=HookName.PRE_ACTION, code=in_hook("while True:\n    pass")),
            HookCode(hook=HookName.PRE_DECISION, code=in_hook("import os")),
        ],
    )
    report = check_patch(patch)
    assert not report.ok
    assert report.codes() == ["banned_while", "banned_import"]
    data = json.loads(report.model_dump_json())
    assert data["violations"][0] == {
        "code": "banned_while",
        "message": "`while` loops are not allowed: use `for` over a bounded range or list",
        "hook": "pre_action",
        "line": 2,
        "col": 5,
    }
    assert data["limits"]["max_nodes"] == 1200
    assert StaticReport.model_validate(data) == report


def test_violations_are_capped_per_hook() -> None:
    body = "\n".join(f"x{i} = foo{i}" for i in range(80))
    patch = Patch(env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, code=in_hook(body))])
    report = check_patch(patch, StaticLimits(max_violations_per_hook=10))
    assert len(report.violations) == 10 and report.truncated


def test_checker_failure_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_r1.sandbox import static_checker

    def boom(self: Any, tree: Any) -> int:
        raise RuntimeError("bug")

    monkeypatch.setattr(static_checker._Checker, "walk", boom)
    source = in_hook("return None")
    violations, stats = check_source(source, "pre_action")
    assert violations == [
        Violation(
            code=Code.UNCHECKABLE,
            message="the checker could not analyse this hook (RuntimeError); simplify it",
            hook="pre_action",
            line=1,
            col=1,
        )
    ]
    # what was counted before the failure is kept; the rest stays zero
    assert stats == HookStats(chars=len(source), lines=3, nodes=7)


def test_codes_are_unique_strings() -> None:
    values = [str(c) for c in Code]
    assert len(values) == len(set(values))
    assert all(re.fullmatch(r"[a-z_]+", v) for v in values)


# -- the scope tables agree with each other and with Python ------------------------------


def test_scope_tables_are_consistent() -> None:
    assert not set(ALLOWED_BUILTINS) & set(BANNED_NAMES)
    assert not set(ALLOWED_BUILTINS) & BANNED_MODULES
    assert all(hasattr(builtins, n) for n in ALLOWED_BUILTINS)
    assert all(hasattr(re, n) for n in RE_EXPORTS)
    assert "factorial" not in MATH_EXPORTS and "sqrt" in MATH_EXPORTS
    for name in ("isinstance", "len", "sorted", "ValueError"):
        assert name in ALLOWED_BUILTINS
    for name in ("print", "type", "id", "iter", "bytearray", "getattr", "open"):
        assert name not in ALLOWED_BUILTINS
    namespace = hook_globals()
    assert set(namespace["__builtins__"]) == set(ALLOWED_BUILTINS)
    assert set(namespace) == {"__builtins__", "__name__", "re", "math", "similarity", "closest"}
    assert not hasattr(namespace["re"], "enum") and not hasattr(namespace["re"], "functools")
    assert hook_globals()["re"] is not namespace["re"]  # fresh per patch load


def test_namespaces_are_read_only() -> None:
    space: Any = Namespace("re", {"search": re.search})
    assert space.search is re.search
    with pytest.raises(AttributeError):
        space.search = None
    with pytest.raises(AttributeError):
        del space.search
    assert "re" in repr(space)


def test_similarity_and_closest() -> None:
    assert similarity("Go To Desk 1", "go to  desk 1") == 1.0
    assert 0.0 <= similarity("open drawer", "go to desk") < 0.6
    assert similarity("", "") == 1.0
    with pytest.raises(TypeError):
        similarity("a", 1)  # type: ignore[arg-type]
    options = ["go to desk 1", "open drawer 1", "look"]
    assert closest("open the drawer 1", options) == "open drawer 1"
    assert closest("LOOK", options) == "look"
    assert closest("xyz", options, cutoff=0.9) is None
    assert closest("anything", []) is None
    assert closest("look", [1, None, "look"]) == "look"  # type: ignore[list-item]
    assert closest("a", ["a"] * (hooklib.MAX_OPTIONS + 10)) == "a"
    long = "x" * 100_000
    assert similarity(long, long) == 1.0  # capped, fast


# -- robustness ------------------------------------------------------------------------


TOKENS = [
    "def",
    "hook",
    "(",
    ")",
    ":",
    "ctx",
    "state",
    ",",
    "\n",
    "    ",
    "return",
    "while",
    "for",
    "in",
    "range",
    "10",
    "**",
    "*",
    "'a'",
    "__class__",
    ".",
    "format",
    "lambda",
    "import",
    "os",
    "try",
    "except",
    "finally",
    "yield",
    "async",
    "await",
    "class",
    "=",
    "[",
    "]",
    "{",
    "}",
    "match",
    "case",
    "@",
    "global",
    "x",
    "_",
    "f'{x}'",
    "\\",
    "#",
    '"""',
    "gi_frame",
    "not",
]


def test_check_source_never_raises_on_token_soup() -> None:
    rng = random.Random(1234)
    for _ in range(1500):
        source = " ".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 60)))
        if rng.random() < 0.5:
            source = in_hook(source)
        violations, stats = check_source(source, "pre_action")
        assert isinstance(violations, list) and stats.chars == len(source)


def test_check_source_never_raises_on_mutated_good_code() -> None:
    rng = random.Random(99)
    for _ in range(600):
        chars = list(VETO_REPEATED_SQL)
        for _ in range(rng.randint(1, 5)):
            position = rng.randrange(len(chars))
            if rng.random() < 0.5:
                del chars[position]
            else:
                chars.insert(position, rng.choice("()[]{}:.,_'\"\n\t x*@"))
        check_source("".join(chars), "pre_action")


def test_deeply_nested_source_is_rejected_not_crashed() -> None:
    assert codes_of(in_hook("return " + "(" * 300 + "1" + ")" * 300)) == {"syntax_error"}
    assert codes_of(in_hook("return " + "-" * 3000 + "1")) == {"syntax_error"}
    assert codes_of(in_hook("return " + "-" * 900 + "1")) == {"too_many_nodes"}
    assert codes_of(in_hook("return " + "[" * 150 + "]" * 150)) == set()


# -- the CLI helper ----------------------------------------------------------------------


def test_check_file_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text(
        "<think>snap it</think><patch>"
        + json.dumps({"description": "snap", "hooks": {"pre_action": SNAP_TO_ADMISSIBLE}})
        + "</patch>"
    )
    report, code = check_file(good, "alfworld")
    assert code == 0 and report["ok"] and report["static"]["ok"]
    assert report["patch"]["hooks"] == ["pre_action"] and len(report["patch"]["sha256"]) == 64
    json.dumps(report)

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"env": "dbbench", "hooks": [{"hook": "pre_action", "code": "import os"}]})
    )
    report, code = check_file(bad, None)
    assert code == 1 and not report["ok"]
    assert report["error"]["code"] in {"banned_import", "missing_hook", "top_level_statement"}
    assert {"banned_import", "missing_hook"} <= {v["code"] for v in report["static"]["violations"]}
    json.dumps(report)

    junk = tmp_path / "junk.txt"
    junk.write_text("I could not think of a patch.")
    report, code = check_file(junk, "alfworld")
    assert code == 2 and report["error"]["code"] == "no_patch_block"

    no_env = tmp_path / "noenv.json"
    no_env.write_text(json.dumps({"hooks": {"pre_action": SNAP_TO_ADMISSIBLE}}))
    report, code = check_file(no_env, None)
    assert code == 2 and report["error"]["code"] == "invalid_patch"

    report, code = check_file(tmp_path / "missing.txt", None)
    assert code == 2 and report["error"]["code"] == "unreadable"

    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    report, code = check_file(binary, None)
    assert code == 2 and report["error"]["code"] == "unreadable"

    huge = tmp_path / "huge.txt"
    huge.write_text("x" * 900_000)
    report, code = check_file(huge, None)
    assert code == 2 and report["error"]["code"] == "too_large"


def power_of_product(twos: int, nest_right: bool = False) -> str:
    """`(2 * 2 * ... * 2) ** 2`: a product `twos` factors deep (left-nested as Python parses
    it, or `2 * (2 * (...))`), squared."""
    if not nest_right:
        return in_hook(f"return ({' * '.join(['2'] * twos)}) ** 2")
    return in_hook(f"return ({'2 * (' * (twos - 1)}2{')' * (twos - 1)}) ** 2")


def test_literal_folding_stops_at_its_nesting_bound_and_refuses_beyond() -> None:
    """The folder of int literals recurses at most 8 levels (a bounded checker, whatever the
    patch): a product 9 factors deep (8 nested levels) folds to 512 and its square passes; one
    11 factors deep is not folded, so its power is refused as too large to judge."""
    for nest_right in (False, True):
        folded, _ = check_source(power_of_product(9, nest_right), "pre_action")
        assert folded == [], nest_right
        unfolded, _ = check_source(power_of_product(11, nest_right), "pre_action")
        assert [v.code for v in unfolded] == ["literal_bomb"], nest_right


def test_a_power_is_judged_by_its_value_even_with_exponent_one() -> None:
    """`N ** 1` is N: a literal power over the limit is refused whatever its exponent."""
    over, _ = check_source(in_hook("return 10000000000 ** 1"), "pre_action")
    assert [v.code for v in over] == ["literal_bomb"]
    at, _ = check_source(in_hook("return 1000000000 ** 1"), "pre_action")
    assert [v.code for v in at] == ["literal_bomb"]  # at the limit counts
    under, _ = check_source(in_hook("return 999999999 ** 1"), "pre_action")
    assert under == []


def test_a_computed_exponent_is_refused_and_a_written_one_is_not() -> None:
    computed, _ = check_source(in_hook("n = ctx['step']\nreturn 2 ** n"), "pre_action")
    assert [v.code for v in computed] == ["computed_exponent"]
    assert "2 ** n" not in computed[0].message and "** n" in computed[0].message
    written, _ = check_source(
        in_hook("x = ctx['step']\nreturn x ** 2 + x ** 0.5 + x ** -1"), "pre_action"
    )
    assert written == []


def test_math_prod_and_lcm_are_not_in_a_hooks_math() -> None:
    for name in ("prod", "lcm", "factorial"):
        found, _ = check_source(in_hook(f"return math.{name}([2, 3])"), "pre_action")
        assert [v.code for v in found] == ["unknown_module_attribute"], name
