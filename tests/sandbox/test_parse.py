"""Parsing engineer output into a Patch: tolerant of drift, stable error codes, never raises."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from harness_r1.contracts import HookCode, HookMode, HookName, Patch
from harness_r1.sandbox.parse import (
    MAX_INPUT_CHARS,
    ParseCode,
    ParseResult,
    dump_patch_json,
    parse_engineer_output,
    render_sections,
    sectioned,
)

CODE = "def hook(ctx, state):\n    return None\n"
PATCH = {"description": "noop", "hooks": [{"hook": "pre_action", "code": CODE}]}
PATCH_JSON = json.dumps(PATCH)


def ok(result: ParseResult) -> Patch:
    assert result.ok, (result.code, result.message)
    assert result.code is None and result.patch is not None
    return result.patch


def test_canonical_output() -> None:
    text = f"<think>The agent loops; veto repeats.</think><patch>{PATCH_JSON}</patch>"
    result = parse_engineer_output(text, "dbbench")
    patch = ok(result)
    assert result.think == "The agent loops; veto repeats."
    assert patch.env == "dbbench"
    assert patch.description == "noop"
    assert patch.code_for(HookName.PRE_ACTION) == CODE
    assert result.notes == ()


@pytest.mark.parametrize(
    ("name", "text", "note"),
    [
        ("no_think", f"<patch>{PATCH_JSON}</patch>", "no think block"),
        ("only_close_think", f"reasoning here</think>\n<patch>{PATCH_JSON}</patch>", "think block"),
        ("leading_ws", f"\n\n   <think>x</think>\n  <patch>\n{PATCH_JSON}\n</patch>", None),
        ("fence_json", f"<think>x</think><patch>\n```json\n{PATCH_JSON}\n```\n</patch>", "fenced"),
        ("fence_plain", f"<think>x</think><patch>```\n{PATCH_JSON}\n```</patch>", "fenced"),
        (
            "fence_with_prose",
            f"<think>x</think><patch>Here:\n```json\n{PATCH_JSON}\n```</patch>",
            "fenced",
        ),
        (
            "trailing",
            f"<think>x</think><patch>{PATCH_JSON}</patch>\nHope this helps!",
            "after </patch>",
        ),
        (
            "json_trailing",
            f"<think>x</think><patch>{PATCH_JSON} and more</patch>",
            "after the JSON",
        ),
        ("no_close_patch", f"<think>x</think><patch>{PATCH_JSON}", "no </patch>"),
        ("upper_tags", f"<think>x</think><PATCH>{PATCH_JSON}</PATCH>", None),
        ("bare_json", PATCH_JSON, "bare JSON"),
        ("bare_after_think", f"<think>x</think>\n{PATCH_JSON}\n", "bare JSON"),
        ("bare_fenced", f"<think>x</think>Patch:\n```json\n{PATCH_JSON}\n```\nDone.", "bare JSON"),
        # the code written as it reads: raw newlines in the JSON string instead of \\n
        (
            "raw_newlines",
            "<think>x</think><patch>" + PATCH_JSON.replace("\\n", "\n") + "</patch>",
            None,
        ),
    ],
)
def test_tolerated_drift(name: str, text: str, note: str | None) -> None:
    result = parse_engineer_output(text, "alfworld")
    patch = ok(result)
    assert patch.code_for(HookName.PRE_ACTION) == CODE
    if note is not None:
        assert any(note in n for n in result.notes), result.notes


def test_patch_tag_inside_think_is_ignored() -> None:
    text = (
        f"<think>I will write <patch>{{not json}}</patch> soon</think><patch>{PATCH_JSON}</patch>"
    )
    result = parse_engineer_output(text, "alfworld")
    ok(result)
    assert "<patch>" in result.think


def test_backticks_inside_the_code_string_do_not_confuse_fences() -> None:
    code = 'def hook(ctx, state):\n    return "use ```sql``` blocks"\n'
    data = {"description": "d", "hooks": [{"hook": "pre_decision", "code": code}]}
    patch = ok(parse_engineer_output(f"<patch>{json.dumps(data)}</patch>", "dbbench"))
    assert patch.code_for(HookName.PRE_DECISION) == code


def test_mapping_form_of_hooks() -> None:
    data = {"description": "two", "hooks": {"pre_action": CODE, "post_feedback": CODE}}
    patch = ok(parse_engineer_output(f"<patch>{json.dumps(data)}</patch>", "webshop"))
    assert [h.hook for h in patch.hooks] == [HookName.PRE_ACTION, HookName.POST_FEEDBACK]


def test_env_from_json_caller_and_mismatch() -> None:
    with_env = json.dumps({**PATCH, "env": "dbbench"})
    assert ok(parse_engineer_output(with_env, None)).env == "dbbench"
    assert ok(parse_engineer_output(with_env, "dbbench")).env == "dbbench"
    mismatch = parse_engineer_output(with_env, "alfworld")
    assert mismatch.code == ParseCode.ENV_MISMATCH and "dbbench" in mismatch.message
    missing = parse_engineer_output(PATCH_JSON, None)
    assert missing.code == ParseCode.INVALID_PATCH and "env" in missing.message


@pytest.mark.parametrize(
    ("name", "text", "code"),
    [
        ("empty", "", ParseCode.NO_PATCH_BLOCK),
        ("prose", "<think>hmm</think>I don't know.", ParseCode.NO_PATCH_BLOCK),
        ("invalid_json", "<patch>{'hooks': []}</patch>", ParseCode.INVALID_JSON),
        (
            "truncated_json",
            '<patch>{"hooks": [{"hook": "pre_action", "code": "def',
            ParseCode.INVALID_JSON,
        ),
        ("no_object_in_tags", "<patch>just words</patch>", ParseCode.INVALID_JSON),
        ("bare_broken", '{"hooks": [', ParseCode.INVALID_JSON),
        ("deep_nesting", "<patch>" + '{"a":' * 30_000 + "</patch>", ParseCode.INVALID_JSON),
        ("huge_int", '<patch>{"hooks": ' + "9" * 5000 + "}</patch>", ParseCode.INVALID_JSON),
        (
            "empty_hooks",
            '<patch>{"description": "x", "hooks": []}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        ("no_hooks", '<patch>{"description": "x"}</patch>', ParseCode.INVALID_PATCH),
        (
            "unknown_hook",
            '<patch>{"hooks": [{"hook": "on_exit", "code": "x"}]}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        (
            "code_not_str",
            '<patch>{"hooks": [{"hook": "pre_action", "code": 3}]}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        (
            "mapping_not_str",
            '<patch>{"hooks": {"pre_action": {"code": "x"}}}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        (
            "extra_key",
            '<patch>{"hooks": {"pre_action": "x"}, "notes": 1}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        (
            "hooks_not_list",
            '<patch>{"hooks": "def hook(ctx, state): pass"}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        (
            "schema_major",
            '<patch>{"schema_version": "2.0", "hooks": {"pre_action": "x"}}</patch>',
            ParseCode.INVALID_PATCH,
        ),
        (
            "list_not_object",
            '<patch>[{"hook": "pre_action", "code": "x"}]</patch>',
            ParseCode.INVALID_PATCH,
        ),
    ],
)
def test_failures_have_stable_codes(name: str, text: str, code: ParseCode) -> None:
    result = parse_engineer_output(text, "alfworld")
    assert result.patch is None
    assert result.code == code, result.message
    assert result.message


def test_a_json_list_is_not_a_patch() -> None:
    result = parse_engineer_output('<patch>[{"hook": "pre_action", "code": "x"}]</patch>', "x")
    assert result.code == ParseCode.INVALID_PATCH and "got list" in result.message


def test_duplicate_hooks_in_list_form() -> None:
    data = {"hooks": [{"hook": "pre_action", "code": CODE}, {"hook": "pre_action", "code": CODE}]}
    result = parse_engineer_output(json.dumps(data), "alfworld")
    assert result.code == ParseCode.INVALID_PATCH and "repeated: pre_action" in result.message


def test_invalid_json_message_has_position() -> None:
    result = parse_engineer_output('<patch>{\n  "hooks": [\n    oops\n]}</patch>', "alfworld")
    assert result.code == ParseCode.INVALID_JSON and "line 3" in result.message


def test_pydantic_errors_are_summarised() -> None:
    hooks = [{"hook": f"bad{i}", "code": i} for i in range(9)]
    result = parse_engineer_output(json.dumps({"hooks": hooks}), "alfworld")
    assert result.code == ParseCode.INVALID_PATCH
    assert "hooks.0.hook" in result.message and "more" in result.message
    assert len(result.message) < 2000


def test_size_cap_and_non_text_inputs() -> None:
    big = "<patch>" + " " * MAX_INPUT_CHARS + PATCH_JSON + "</patch>"
    assert parse_engineer_output(big, "alfworld").code == ParseCode.TOO_LARGE
    assert parse_engineer_output(PATCH_JSON, "alfworld", max_chars=10).code == ParseCode.TOO_LARGE
    assert ok(parse_engineer_output(PATCH_JSON.encode(), "alfworld")).env == "alfworld"
    assert parse_engineer_output(b"\xff\xfe" * 3, "alfworld").code == ParseCode.NO_PATCH_BLOCK
    values: list[Any] = [None, 42, ["<patch>"], {"hooks": []}]
    for value in values:
        result = parse_engineer_output(value, "alfworld")
        assert result.code == ParseCode.NO_PATCH_BLOCK


def test_result_to_dict_is_json() -> None:
    good = parse_engineer_output(f"<think>abc</think><patch>{PATCH_JSON}</patch>", "alfworld")
    assert json.loads(json.dumps(good.to_dict())) == {
        "ok": True,
        "code": None,
        "message": "",
        "think_chars": 3,
        "notes": [],
    }
    bad = parse_engineer_output("nothing", "alfworld").to_dict()
    assert bad["code"] == "no_patch_block" and bad["ok"] is False


FRAGMENTS = [
    "<think>",
    "</think>",
    "<patch>",
    "</patch>",
    "```",
    "```json",
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ",",
    '"hooks"',
    '"hook"',
    '"code"',
    '"env"',
    '"pre_action"',
    '"episode_start"',
    "null",
    "true",
    "1e999",
    "-0",
    "\\u0000",
    "\\",
    "\n",
    " ",
    "def hook(ctx, state):",
    "# === hook: ",
    "(remove) ===",
    "# env: webshop\n",
    "# description:",
    '"description"',
    "\x00",
    "\ud800",
    "é",
    "<",
    ">",
    "/",
    "patch",
    "think",
]


def _random_text(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 200)))
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 80)))


def test_never_raises_on_random_input() -> None:
    rng = random.Random(20240601)
    for _ in range(3000):
        text = _random_text(rng)
        result = parse_engineer_output(text, rng.choice([None, "alfworld"]))
        assert isinstance(result, ParseResult)
        assert (result.patch is None) == (result.code is not None)
        json.dumps(result.to_dict())


@pytest.mark.parametrize(
    "base",
    [
        f"<think>plan</think><patch>```json\n{PATCH_JSON}\n```</patch>",
        "<think>plan</think><patch>\n# description: d\n# === hook: pre_action ===\n"
        f"{CODE}# === hook: post_feedback (replace) ===\n{CODE}</patch>",
    ],
    ids=["json", "sections"],
)
def test_never_raises_on_mutated_valid_output(base: str) -> None:
    rng = random.Random(7)
    assert parse_engineer_output(base, "alfworld").ok
    for _ in range(2000):
        chars: list[Any] = list(base)
        for _ in range(rng.randint(1, 6)):
            position = rng.randrange(len(chars))
            if rng.random() < 0.5:
                del chars[position]
            else:
                chars.insert(position, rng.choice(FRAGMENTS))
        result = parse_engineer_output("".join(chars), "alfworld")
        assert (result.patch is None) == (result.code is not None)


def test_dump_patch_json_writes_raw_newlines_and_reads_back_exactly() -> None:
    code = 'def hook(ctx, state):\n    return re.sub(r"\\n\\s", "\\t", "a\\\\nb")\n'
    body = {"description": "d", "hooks": [{"hook": "pre_action", "code": code}]}
    text = dump_patch_json(body)
    assert "\n    return" in text  # newlines as written
    assert "\\\\n\\\\s" in text  # the regex's escaped backslashes stay escaped
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # not strict JSON: the point of the tolerant decoder
    assert json.loads(text, strict=False) == body
    patch = ok(parse_engineer_output(f"<think>t</think><patch>{text}</patch>", "alfworld"))
    assert patch.code_for(HookName.PRE_ACTION) == code


# -- the sectioned format -----------------------------------------------------------------------

QUOTING = (
    'def hook(ctx, state):\n    """Doc."""\n'
    '    return {"effect": "hint", "text": "a \\"b\\" \\n c"}\n'
)
SECTIONS = f"# description: quotes and escapes\n# === hook: post_feedback ===\n{QUOTING}"


def test_sections_are_read_with_code_as_written() -> None:
    result = parse_engineer_output(f"<think>t</think><patch>\n{SECTIONS}</patch>", "webshop")
    patch = ok(result)
    assert patch.env == "webshop" and patch.description == "quotes and escapes"
    assert patch.code_for(HookName.POST_FEEDBACK) == QUOTING  # no escape was decoded
    assert result.notes == ()


def test_render_sections_round_trips_modes() -> None:
    patch = Patch(
        env="dbbench",
        description="one line of text",
        hooks=[
            HookCode(hook=HookName.PRE_ACTION, code=CODE, mode=HookMode.REPLACE),
            HookCode(hook=HookName.POST_FEEDBACK, mode=HookMode.REMOVE),
            HookCode(hook=HookName.EPISODE_START, code=QUOTING),
        ],
    )
    text = render_sections(patch, with_env=False)
    assert "# env:" not in text and "# === hook: pre_action (replace) ===" in text
    back = ok(parse_engineer_output(f"<think>t</think><patch>{text}</patch>", "dbbench"))
    assert back == patch
    with_env = render_sections(patch)
    assert ok(parse_engineer_output(with_env)).env == "dbbench"


@pytest.mark.parametrize(
    ("name", "text", "note"),
    [
        ("loose_section_line", "<patch>\n#=== hook:post_feedback  ==\n" + QUOTING, None),
        ("fenced_code", f"<patch>\n# === hook: post_feedback ===\n```python\n{QUOTING}```\n", None),
        (
            "indented_code",
            "<patch># === hook: post_feedback ===\n    " + QUOTING.replace("\n    ", "\n        "),
            None,
        ),
        ("bare_sections", f"Here is my patch.\n{SECTIONS}", "bare sections"),
        ("truncated", f"<think>t</think><patch>{SECTIONS}", "no </patch>"),
    ],
)
def test_sections_tolerate_drift(name: str, text: str, note: str | None) -> None:
    result = parse_engineer_output(text, "webshop")
    patch = ok(result)
    assert patch.code_for(HookName.POST_FEEDBACK) == QUOTING, name
    if note is not None:
        assert any(note in n for n in result.notes), result.notes


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("# === hook: pre_act ===\n" + CODE, ParseCode.INVALID_PATCH, "hooks.0.hook"),
        ("# === hook: pre_action (swap) ===\n" + CODE, ParseCode.INVALID_PATCH, "unknown mode"),
        ("# === hook: pre_action (remove) ===\n" + CODE, ParseCode.INVALID_PATCH, "no code"),
        (
            "# env: alfworld\n# === hook: pre_action ===\n" + CODE,
            ParseCode.ENV_MISMATCH,
            "alfworld",
        ),
        ("# description: only\n" + CODE, ParseCode.INVALID_JSON, "no JSON object"),
    ],
)
def test_broken_sections_have_stable_codes(text: str, code: ParseCode, message: str) -> None:
    result = parse_engineer_output(f"<think>t</think><patch>{text}</patch>", "webshop")
    assert result.code == code and message in result.message, (result.code, result.message)


def test_code_that_would_end_a_section_is_not_sectioned() -> None:
    for code in (CODE + "# === hook: pre_action ===\n", CODE + "# '</patch>'\n"):
        patch = Patch(env="webshop", hooks=[HookCode(hook=HookName.PRE_ACTION, code=code)])
        assert not sectioned(patch)
        with pytest.raises(ValueError, match="section line"):
            render_sections(patch)


def test_a_long_run_of_spaces_does_not_stall_the_section_search() -> None:
    import time

    started = time.perf_counter()
    for text in ("#=hook:a" + " " * 200_000 + "x", "# === hook: pre_action" + " \t" * 99_000):
        parse_engineer_output(f"<patch>{text}</patch>", "webshop")
    assert time.perf_counter() - started < 2.0


SECTION_IN_CODE = "def hook(ctx, state):\n    # === hook: pre_action ===\n    return None\n"


@pytest.mark.parametrize(
    "wrap",
    [
        "<patch>```json\n{}\n```</patch>",
        "Here it is: {}",
        "<patch>{}</patch>",
    ],
    ids=["fenced", "after_prose", "tagged"],
)
def test_json_whose_code_holds_a_section_line_stays_json(wrap: str) -> None:
    body = {"description": "d", "hooks": [{"hook": "pre_action", "code": SECTION_IN_CODE}]}
    text = wrap.replace("{}", dump_patch_json(body))
    assert ok(parse_engineer_output(text, "webshop")).code_for(HookName.PRE_ACTION) == (
        SECTION_IN_CODE
    )


@pytest.mark.parametrize(
    ("description", "code"),
    [
        ("d", "    def hook(ctx, state):\n        return None\n"),  # indented as a whole
        ("d", CODE + "\n\n"),  # trailing blank lines
        ("d", CODE.rstrip("\n")),  # no final newline
        ("ends </patch> here", CODE),
        ("two  spaces\nand a newline", CODE),  # the sections keep one line, single-spaced
    ],
)
def test_patches_the_sections_would_change_are_not_sectioned(description: str, code: str) -> None:
    patch = Patch(
        env="webshop",
        description=description,
        hooks=[HookCode(hook=HookName.PRE_ACTION, code=code)],
    )
    assert not sectioned(patch)


def test_modes_are_read_in_any_case() -> None:
    text = "<patch># === hook: pre_action (REPLACE) ===\n" + CODE + "</patch>"
    patch = ok(parse_engineer_output(text, "webshop"))
    assert patch.hooks[0].mode == HookMode.REPLACE
