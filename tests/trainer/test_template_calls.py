"""Template calls: the description line alone renders the teacher's patch; anything else is
parsed as before; a call that names templates wrongly is refused with its own reason."""

from __future__ import annotations

import time

from harness_r1.contracts import Patch
from harness_r1.sandbox.intake import BAD_TEMPLATE_CALL
from harness_r1.sandbox.parse import render_completion
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.propose import classify
from harness_r1.trainer.shaping import PARSE_WEIGHTS
from harness_r1.trainer.teacher import TemplateChoice, TemplateTeacher
from harness_r1.trainer.template_calls import as_call, template_call

PICK = "templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.6)."


def _call(description: str, close: bool = True) -> str:
    end = "\n</patch>" if close else ""
    return f"<think>Buy.</think><patch>\n# description: {description}{end}"


def _teacher_patch(description: str = PICK) -> Patch:
    choice = TemplateChoice.of("ws_pick_options", {"buy": True, "threshold": 0.6})
    return TemplateTeacher().render_patch("webshop", [choice], description=description)


def test_a_call_renders_the_teachers_patch_and_is_valid() -> None:
    proposal = classify(EngineerSample(text=_call(PICK)), "webshop")
    assert proposal.valid, proposal.message
    assert proposal.patch == _teacher_patch()
    assert "template call" in proposal.notes


def test_a_call_cut_off_before_its_closing_tag_still_renders() -> None:
    result = template_call(_call(PICK, close=False), "webshop")
    assert result is not None and result.patch == _teacher_patch()


def test_a_value_the_template_does_not_take_is_a_bad_call() -> None:
    text = _call("templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.5).")
    proposal = classify(EngineerSample(text=text), "webshop")
    assert not proposal.valid
    assert (proposal.stage, proposal.reason) == ("parse", BAD_TEMPLATE_CALL)
    assert "threshold=0.5" in proposal.message


def test_a_template_of_another_env_is_a_bad_call() -> None:
    proposal = classify(EngineerSample(text=_call(PICK)), "dbbench")
    assert (proposal.stage, proposal.reason) == ("parse", BAD_TEMPLATE_CALL)
    assert "not for env dbbench" in proposal.message


def test_a_listed_template_without_its_parameters_is_a_bad_call() -> None:
    result = template_call(_call("templates: ws_pick_options. Buy."), "webshop")
    assert result is not None and result.patch is None
    assert "listed without parameters" in (result.error or "")


def test_code_is_parsed_as_written_even_under_a_teachers_description() -> None:
    """A hook section makes it free code: the engineer's body runs, not the template's."""
    body = "def hook(ctx, state):\n    return {'effect': 'force', 'text': 'click[buy now]'}\n"
    text = (
        "<think>Buy.</think><patch>\n# description: "
        + PICK
        + "\n# === hook: pre_action ===\n"
        + body
        + "</patch>"
    )
    assert template_call(text, "webshop") is None
    proposal = classify(EngineerSample(text=text), "webshop")
    assert proposal.valid and proposal.patch is not None
    assert proposal.patch.hooks[0].code == body


def test_a_description_that_names_no_template_is_no_call() -> None:
    text = _call("Snap invalid actions to the closest admissible one.")
    assert template_call(text, "webshop") is None
    assert classify(EngineerSample(text=text), "webshop").reason != BAD_TEMPLATE_CALL


def test_a_call_of_an_invented_template_is_a_bad_call() -> None:
    text = _call("templates: db_sql_error_sql_count. db_sql_error_sql_count(max_rows=100).")
    proposal = classify(EngineerSample(text=text), "dbbench")
    assert (proposal.stage, proposal.reason) == ("parse", BAD_TEMPLATE_CALL)
    assert "'db_sql_error_sql_count' names no template" in proposal.message


def test_a_teachers_completion_as_a_call_renders_the_same_patch() -> None:
    completion = render_completion(_teacher_patch(), "Buy.")
    call = as_call(completion, "webshop")
    assert call == _call(PICK)
    assert classify(EngineerSample(text=call), "webshop").patch == _teacher_patch()


def test_free_code_has_no_call_form() -> None:
    patch = _teacher_patch(description="Buy what the goal names.")
    assert as_call(render_completion(patch, "Buy."), "webshop") is None


def test_a_bad_call_is_graded_as_a_patch_in_shape_with_a_wrong_part() -> None:
    assert PARSE_WEIGHTS[BAD_TEMPLATE_CALL] < PARSE_WEIGHTS["no_patch_block"]


def test_hostile_call_lines_are_read_in_linear_time() -> None:
    """Many `<patch>` openings on one long line, and one long line of spaces: each is read once
    (a regex that backtracks over the line took minutes on the first)."""
    for text in (
        "<patch>#description:templates:" * 6000 + "\nx",
        "<patch># description: templates: " + " " * 199_000 + "x",
    ):
        started = time.perf_counter()
        template_call(text, "webshop")
        assert time.perf_counter() - started < 5.0


def test_every_listed_name_must_be_a_template() -> None:
    """No silent partial rendering: an unknown name beside a known one is refused."""
    text = _call(
        "templates: ws_pick_options, made_up. ws_pick_options(buy=True, threshold=0.6). made_up()."
    )
    result = template_call(text, "webshop")
    assert result is not None and result.patch is None
    assert "made_up" in (result.error or "")


def test_a_template_labelled_twice_is_a_bad_call() -> None:
    text = _call(
        "templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.6). "
        "ws_pick_options(buy=False, threshold=0.9)."
    )
    result = template_call(text, "webshop")
    assert result is not None and "twice" in (result.error or "")


def test_a_label_for_an_unlisted_template_is_a_bad_call() -> None:
    text = _call(
        "templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.6). "
        "veto_repeat(max_in_a_row=3, message=0)."
    )
    result = template_call(text, "webshop")
    assert result is not None and "veto_repeat" in (result.error or "")


def test_an_unknown_parameter_is_a_bad_call_naming_it() -> None:
    text = _call("templates: ws_pick_options. ws_pick_options(buy=True, colour=red).")
    proposal = classify(EngineerSample(text=text), "webshop")
    assert proposal.reason == BAD_TEMPLATE_CALL
    assert "colour" in proposal.message


def test_the_call_is_read_where_the_parser_reads_the_patch() -> None:
    """A call quoted in the think block, or in a second patch block, is not the patch."""
    json_patch = '{"description": "d", "hooks": [{"hook": "pre_action", "code": "x"}]}'
    quoted = f"<think>I could write <patch>\n# description: {PICK}\n</patch></think>"
    assert template_call(quoted + f"<patch>{json_patch}</patch>", "webshop") is None
    second = f"<think>t</think><patch>{json_patch}</patch><patch>\n# description: {PICK}\n"
    assert template_call(second + "</patch>", "webshop") is None


def test_text_after_the_call_line_makes_it_no_call() -> None:
    assert template_call(_call(PICK).replace("\n</patch>", "\nmore\n</patch>"), "webshop") is None


def test_text_after_the_closing_tag_is_ignored_as_the_parser_ignores_it() -> None:
    result = template_call(_call(PICK) + " trailing words", "webshop")
    assert result is not None and result.patch == _teacher_patch()


def test_the_prefix_may_vary_in_case_and_spacing() -> None:
    varied = PICK.replace("templates: ", "Templates:")
    result = template_call(_call(varied), "webshop")
    assert result is not None and result.patch == _teacher_patch()
