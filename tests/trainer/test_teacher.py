"""The offline template teacher: every template renders code the sandbox accepts, proposals are
in the engineer's exact format, deterministic, varied, steered by the packet's signals, and a
proposed patch runs in the isolated worker with a visible effect on a real env."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import (
    FailurePacket,
    HookMode,
    HookName,
    IncumbentHook,
    PacketEpisode,
    RuntimeSignals,
    Snippet,
    TargetRef,
    Termination,
)
from harness_r1.harness.context import EpisodeView
from harness_r1.harness.hooks import InProcessHooks
from harness_r1.sandbox.hooklib import hook_globals
from harness_r1.sandbox.parse import parse_engineer_output
from harness_r1.sandbox.static import check_patch, check_source
from harness_r1.trainer.teacher import (
    TeacherConfig,
    TemplateChoice,
    TemplateTeacher,
    choices_in,
    library_table,
    templates_in,
)
from harness_r1.trainer.templates import TEMPLATES, RenderContext
from harness_r1.trainer.writers import PatchWriter, TemplateWriter

DATA_ROOT = Path("/work/shared/benchmarks")
ENVS = ("alfworld", "dbbench", "webshop")
DB_INSTRUCTION = (
    "What are the Notes when the Method is decision? The name of this table is Jiu-Jitsu "
    "Championships Results, and the headers of this table are Result,Opponent,Method,Event,Notes."
)


def _episode(
    task_type: str,
    instruction: str,
    snippets: list[tuple[str, str, list[str]]],
    termination: Termination = Termination.STEP_LIMIT,
    constraints: list[str] | None = None,
) -> PacketEpisode:
    return PacketEpisode(
        masked_task_id="T1",
        task_type=task_type,
        instruction=instruction,
        constraints=constraints or [],
        success=False,
        reward=0.0,
        termination=termination,
        steps=max(1, len(snippets)),
        snippets=[
            Snippet(step=i, action=a, observation=o, flags=f)
            for i, (a, o, f) in enumerate(snippets)
        ],
        failure_step=0,
        failure_streak=len(snippets),
    )


def _packet(env: str, episodes: list[PacketEpisode], **signals: int) -> FailurePacket:
    return FailurePacket(
        packet_id="0" * 64,
        env=env,
        target=TargetRef(model_id="tiny"),
        harness_version="base",
        selection="round_robin",
        token_budget=4000,
        episodes=episodes,
        signals=RuntimeSignals(**signals),
        batch_size=len(episodes) + 2,
        failures=len(episodes),
    )


def db_sql_error_packet() -> FailurePacket:
    error = ("sql: SELECT Notes FROM Jiu-Jitsu Championships Results", "Error: near '-'", [])
    flagged = (error[0], error[1], ["sql_error"])
    episodes = [
        _episode("other", DB_INSTRUCTION, [error, flagged, flagged, flagged]),
        _episode("comparison", DB_INSTRUCTION, [flagged, flagged, flagged, flagged]),
    ]
    return _packet("dbbench", episodes, sql_errors=8, step_limit_hits=2, repeated_actions=1)


def alfworld_nothing_packet() -> FailurePacket:
    step = ("think about it", "Nothing happens.", ["invalid", "nothing_happens"])
    episodes = [
        _episode("pick_and_place_simple", "put a mug in desk.", [step] * 5),
        _episode("pick_clean_then_place_in_recep", "put a clean apple in fridge.", [step] * 5),
    ]
    return _packet("alfworld", episodes, invalid_actions=10, nothing_happens=10, step_limit_hits=2)


def webshop_click_packet() -> FailurePacket:
    bad = ("click[red shirt]", "Invalid action 'click[red shirt]': not a clickable", ["invalid"])
    episodes = [
        _episode(
            "shirts",
            "i need a red shirt in size large, and price lower than 30.00 dollars",
            [("search[red shirt]", "results ...", []), bad, bad, bad],
            constraints=["price < 30.00 dollars", "option: color red", "option: size large"],
        ),
        _episode(
            "candles",
            "i want a 3 pack of soy candles, and price lower than 20.00 dollars",
            [bad, bad, bad, ("click[buy now]", "Thank you for shopping", [])],
            termination=Termination.FAILURE,
            constraints=["price < 20.00 dollars", "option: pack of 3"],
        ),
    ]
    return _packet("webshop", episodes, invalid_actions=6, step_limit_hits=1)


def quiet_packet(env: str) -> FailurePacket:
    """A packet without symptoms (wrong answers only)."""
    instruction = {
        "alfworld": "put a mug in desk.",
        "dbbench": DB_INSTRUCTION,
        "webshop": "i want a lamp, and price lower than 40.00 dollars",
    }[env]
    episodes = [_episode("other", instruction, [("x", "y", [])], Termination.FAILURE)]
    return _packet(env, episodes)


PACKETS = {
    "dbbench": db_sql_error_packet,
    "alfworld": alfworld_nothing_packet,
    "webshop": webshop_click_packet,
}


# -- the library --------------------------------------------------------------------------------


def test_library_covers_every_hook_and_env() -> None:
    assert len(TEMPLATES) >= 12
    hooks = {t.hook for t in TEMPLATES.values()}
    assert hooks == set(HookName)
    for env in ENVS:
        mine = {t.name for t in TEMPLATES.values() if t.applies_to(env)}
        specific = {t.name for t in TEMPLATES.values() if env in t.envs}
        assert len(mine) >= 8 and len(specific) >= 4, env
    rows = library_table()
    assert {r["name"] for r in rows} == set(TEMPLATES)
    assert all(r["params"] for r in rows)


def _param_grid(name: str) -> list[dict[str, Any]]:
    """Every parameter's low, default and high (and every choice), combined; capped at 40."""
    template = TEMPLATES[name]
    axes = []
    for param in template.params:
        values = param.values()
        picked = [values[0], param.default, values[-1]] if len(values) > 3 else values
        axes.append(list(dict.fromkeys(picked)))
    combos = [
        dict(zip([p.name for p in template.params], c, strict=True))
        for c in itertools.product(*axes)
    ]
    return combos[:40]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_renders_code_that_passes_the_static_checks(name: str) -> None:
    template = TEMPLATES[name]
    envs = sorted(template.envs) or [*ENVS, "other"]
    grid = _param_grid(name)
    assert len(grid) >= 2 or not template.params
    for env, params in itertools.product(envs, grid):
        for types in ((), ("pick_two_obj_and_place", "INSERT", "aggregation-SUM", "other")):
            context = RenderContext(env=env, task_types=types, option_kinds=("color", "size"))
            source = template.render(params, context)
            violations, stats = check_source(source, str(template.hook))
            assert not violations, (params, [v.message for v in violations], source)
            if template.composable:
                assert stats.helpers == 0, "composable templates render one function"
    # rendered as a composed rule too
    rule = template.render({}, RenderContext(env=envs[0]), function="rule1")
    assert rule.startswith("def rule1(ctx, state):")


def test_parameters_are_clamped_into_their_ranges() -> None:
    choice = TemplateChoice.of("veto_repeat", {"max_in_a_row": 99})
    assert dict(choice.params)["max_in_a_row"] == 4
    with pytest.raises(KeyError):
        TemplateChoice.of("veto_repeat", {"nope": 1})


# -- proposals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ENVS)
def test_proposals_parse_pass_static_checks_and_are_deterministic(env: str) -> None:
    teacher = TemplateTeacher()
    assert isinstance(TemplateWriter(), PatchWriter)
    for packet in (PACKETS[env](), quiet_packet(env)):
        texts = teacher.propose(packet, 4, seed=7)
        assert len(texts) == 4
        assert texts == teacher.propose(packet, 4, seed=7)
        assert len(set(texts)) > 1
        for text in texts:
            assert text.startswith("<think>") and "</think><patch>\n# description: " in text
            assert text.endswith("\n</patch>")
            parsed = parse_engineer_output(text, env=env)
            assert parsed.ok, parsed.message
            assert parsed.patch is not None and parsed.patch.env == env
            assert not parsed.notes
            assert check_patch(parsed.patch).ok
            assert 2 <= parsed.think.count(". ") + 1 <= 6
            names = templates_in(parsed.patch.description)
            assert 1 <= len(names) <= 3
            hooks = [h.hook for h in parsed.patch.hooks]
            assert len(hooks) == len(set(hooks))


def test_seed_and_k_change_the_proposals() -> None:
    teacher = TemplateTeacher()
    packet = db_sql_error_packet()
    first = teacher.propose(packet, 6, seed=1)
    assert first != teacher.propose(packet, 6, seed=2)
    assert teacher.propose(packet, 1, seed=1) == first[:1]  # the greedy proposal leads
    metas = teacher.proposals(packet, 6, seed=1)
    signatures = {m.choices for m in metas}
    assert len(signatures) == 6


def test_k_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TemplateTeacher().propose(db_sql_error_packet(), 0, seed=0)


# -- signals steer the choice -------------------------------------------------------------------


def test_sql_errors_select_the_sql_error_hint() -> None:
    proposals = TemplateTeacher().proposals(db_sql_error_packet(), 6, seed=3)
    assert "db_sql_error_hint" in proposals[0].templates
    assert sum("db_sql_error_hint" in p.templates for p in proposals) >= 3
    assert "SQL errors" in proposals[0].think
    quiet = TemplateTeacher().proposals(quiet_packet("dbbench"), 6, seed=3)
    assert all("db_sql_error_hint" not in p.templates for p in quiet)


def test_nothing_happens_selects_snap_and_explore() -> None:
    proposals = TemplateTeacher().proposals(alfworld_nothing_packet(), 6, seed=3)
    first = set(proposals[0].templates)
    assert {"snap_admissible", "alfworld_explore_on_nothing"} <= first
    steered = dict(next(c for c in proposals[0].choices if c.name == "snap_admissible").params)
    assert steered["cutoff"] <= 0.45  # many invalid actions: snap more eagerly
    wanted = {"snap_admissible", "alfworld_explore_on_nothing", "invalid_hint"}
    assert sum(bool(wanted & set(p.templates)) for p in proposals) >= 4


def test_invalid_clicks_select_click_and_option_templates() -> None:
    proposals = TemplateTeacher().proposals(webshop_click_packet(), 6, seed=3)
    click_templates = {"ws_click_best", "ws_pick_options", "ws_invalid_click_hint"}
    assert len(click_templates & set(proposals[0].templates)) >= 2
    assert "invalid clicks" in proposals[0].think
    quiet = TemplateTeacher().proposals(quiet_packet("webshop"), 6, seed=3)
    assert "ws_invalid_click_hint" not in quiet[0].templates


def test_modification_tasks_at_the_step_limit_select_finishing() -> None:
    insert = (
        "Insert a record ... The name of this table is T, and the headers of this table are A,B."
    )
    step = ("sql: INSERT INTO `T` VALUES ('1', '2')", "[]", [])
    episodes = [_episode("INSERT", insert, [step, step, step])] * 2
    packet = _packet("dbbench", episodes, step_limit_hits=2, repeated_actions=4)
    proposals = TemplateTeacher().proposals(packet, 4, seed=0)
    assert "db_finish_modification" in proposals[0].templates
    assert "db_commit_result" not in proposals[0].templates  # no query task in the packet


# -- the hooks behave (trusted, in process: our own rendered code) ------------------------------


def _hooks(patch_code: dict[str, str]) -> InProcessHooks:
    functions = {}
    for hook, code in patch_code.items():
        scope = hook_globals()
        exec(compile(code, f"<{hook}>", "exec"), scope)  # noqa: S102 - our own templates
        functions[hook] = scope["hook"]
    return InProcessHooks("test", functions)


def _render(name: str, env: str, **params: Any) -> str:
    return TEMPLATES[name].render(params, RenderContext(env=env))


def _ctx(instruction: str, env: str, task_type: str = "other", **extra: Any) -> dict[str, Any]:
    from harness_r1.contracts import TaskSpec

    task = TaskSpec(task_id="t", env=env, split="dev", task_type=task_type, instruction=instruction)
    view = EpisodeView(task=task, max_steps=10)
    ctx = view.ctx()
    ctx.update(extra)
    return ctx


def test_templates_do_what_they_say() -> None:
    hooks = _hooks(
        {
            "pre_action": _render("db_answer_rewrite", "dbbench"),
            "post_feedback": _render("db_sql_error_hint", "dbbench"),
        }
    )
    ctx = _ctx(DB_INSTRUCTION, "dbbench", proposed_action="The answer is 12.", raw_output="")
    call = hooks.call(HookName.PRE_ACTION, ctx, {})
    assert call.value == {"effect": "rewrite", "text": 'answer: ["12"]'}
    ctx = _ctx(DB_INSTRUCTION, "dbbench", action="sql: x", feedback="Error: no")
    ctx["info"]["sql_error"] = "no such table"
    hint = hooks.call(HookName.POST_FEEDBACK, ctx, {}).value
    assert "backticks" in hint and "`Notes`" in hint

    snap = _hooks({"pre_action": _render("snap_admissible", "alfworld", cutoff=0.5)})
    ctx = _ctx("put a mug in desk.", "alfworld", proposed_action="go to the desk", raw_output="")
    ctx["admissible_actions"] = ["go to desk 1", "go to shelf 1", "look"]
    assert snap.call(HookName.PRE_ACTION, ctx, {}).value == {
        "effect": "rewrite",
        "text": "go to desk 1",
    }

    take = _hooks({"pre_action": _render("alfworld_take_place", "alfworld")})
    ctx = _ctx("put a clean mug in desk.", "alfworld", proposed_action="look", raw_output="")
    ctx["admissible_actions"] = ["take mug 1 from shelf 1", "go to desk 1"]
    assert take.call(HookName.PRE_ACTION, ctx, {}).value["text"] == "take mug 1 from shelf 1"

    options = _hooks({"pre_action": _render("ws_pick_options", "webshop", threshold=0.6)})
    ctx = _ctx("i need a red shirt, and price lower than 30.00 dollars", "webshop")
    ctx.update(proposed_action="junk", raw_output="junk")
    ctx["admissible_actions"] = ["click[blue]", "click[red]", "click[buy now]"]
    call = options.call(HookName.PRE_ACTION, ctx, {})
    assert call.value["text"] == "click[red]"
    assert options.call(HookName.PRE_ACTION, ctx, call.state).value["text"] == "click[buy now]"


def test_the_options_check_vetoes_buying_once_naming_the_unclicked_option() -> None:
    check = _hooks({"pre_action": _render("ws_options_check", "webshop")})
    ctx = _ctx("i need a red shirt in size large, and price lower than 30.00 dollars", "webshop")
    ctx.update(proposed_action="click[buy now]", raw_output="Action:\nclick[buy now]")
    ctx["admissible_actions"] = ["click[blue]", "click[red]", "click[large]", "click[buy now]"]
    ctx["history"] = [{"action": "click[large]", "observation": "item page"}]
    call = check.call(HookName.PRE_ACTION, ctx, {})
    assert call.value["effect"] == "veto"
    assert "red" in call.value["text"] and "blue" not in call.value["text"]
    assert "large" not in call.value["text"]  # already clicked
    # one veto an episode: the model may still buy as it likes
    assert check.call(HookName.PRE_ACTION, ctx, call.state).value is None
    ctx["proposed_action"] = "click[red]"  # only buy now is checked
    assert check.call(HookName.PRE_ACTION, ctx, {}).value is None


# -- end to end: isolated worker, real env, no model ---------------------------------------------


def _run_dbbench(patch: Any, reply: str, tasks: list[Any]) -> list[Any]:
    from harness_r1.envs import get_suite
    from harness_r1.harness import EpisodeSpec, HarnessRuntime, RunConfig
    from harness_r1.harness.policies import ScriptedPolicy
    from harness_r1.sandbox.executor import IsolatedHooks
    from harness_r1.sandbox.sandbox_config import SandboxConfig

    runtime = HarnessRuntime(
        get_suite("dbbench"), ScriptedPolicy([reply]), DATA_ROOT, RunConfig(max_steps=3)
    )
    hooks = IsolatedHooks(patch, SandboxConfig(call_budget_s=2.0), overlay_id="teacher")
    try:
        assert hooks.static_rejection is None
        trajectories = runtime.run(
            [EpisodeSpec(task=t, seed=i, hooks=hooks) for i, t in enumerate(tasks)]
        )
    finally:
        hooks.close()
        runtime.close()
    assert all(not s.faults for t in trajectories for s in t.steps)
    assert hooks.events["starts"] >= 1 and hooks.events["ok"] > 0  # the isolated worker ran
    assert hooks.events.get("raised", 0) == 0 and hooks.events.get("timeouts", 0) == 0
    return trajectories


def _query_tasks(count: int) -> list[Any]:
    from harness_r1.envs import get_suite
    from harness_r1.harness.tasks import spread

    tasks = spread(get_suite("dbbench").load_tasks(DATA_ROOT, "dev"), 20)
    chosen = [t for t in tasks if t.task_type not in ("INSERT", "UPDATE", "DELETE")]
    assert len(chosen) >= count
    return chosen[:count]


@pytest.mark.integration
def test_a_proposed_patch_acts_on_a_real_dbbench_episode() -> None:
    """The greedy proposal for a packet full of SQL errors, in the isolated worker, against a
    frozen "model" that keeps writing SQL with an unquoted table name: the hint shows up."""
    proposal = TemplateTeacher().proposals(db_sql_error_packet(), 3, seed=0)[0]
    assert "db_sql_error_hint" in proposal.templates
    parsed = parse_engineer_output(proposal.text, env="dbbench")
    assert parsed.patch is not None
    reply = "Action: Operation\n```sql\nSELECT * FROM no such table\n```"
    trajectories = _run_dbbench(parsed.patch, reply, _query_tasks(2))
    effects = [(e.hook, e.kind, e.text) for t in trajectories for s in t.steps for e in s.effects]
    hints = [text for hook, kind, text in effects if hook == "post_feedback" and kind == "hint"]
    assert hints and all("backticks" in h for h in hints), effects


@pytest.mark.integration
def test_lookup_and_commit_templates_drive_a_real_episode_without_a_model() -> None:
    """db_lookup_first forces a targeted SELECT; db_commit_result answers from its row."""
    patch = TemplateTeacher().render_patch(
        "dbbench",
        [TemplateChoice.of("db_lookup_first"), TemplateChoice.of("db_commit_result")],
    )
    trajectories = _run_dbbench(patch, "I do not know.", _query_tasks(6))
    forced = [
        (e.hook, e.text)
        for t in trajectories
        for s in t.steps
        for e in s.effects
        if e.kind == "force"
    ]
    assert any(h == "pre_action" and text.startswith("sql: SELECT `") for h, text in forced)
    assert any(h == "post_feedback" and text.startswith("answer: [") for h, text in forced)


def test_prefer_single_quotes_changes_quotes_only_where_meaning_is_kept() -> None:
    from harness_r1.trainer.templates.base import prefer_single_quotes

    code = (
        'def hook(ctx, state):\n    """Doc."""\n'
        '    x = "a" + "it\'s" + f"{ctx}" + r"\\s+"\n    return {"effect": "veto", "text": x}\n'
    )
    out = prefer_single_quotes(code)
    assert out == (
        "def hook(ctx, state):\n    '''Doc.'''\n"
        "    x = 'a' + \"it's\" + f\"{ctx}\" + r'\\s+'\n    return {'effect': 'veto', 'text': x}\n"
    )
    assert prefer_single_quotes("def broken(:\n") == "def broken(:\n"  # kept as given


def test_template_code_has_fewer_double_quotes_than_json_escapes_need() -> None:
    """Rendered template code is single-quoted wherever it can be: what is left holds a '."""
    import ast

    for template in TEMPLATES.values():
        code = template.render({}, RenderContext(env=min(template.envs, default="dbbench")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                segment = ast.get_source_segment(code, node) or ""
                if segment.lstrip("rRbBuU").startswith('"'):
                    assert "'" in node.value, (template.name, segment)


# -- a live overlay (issue 17, rule 6) --------------------------------------------------------


def test_a_template_already_live_is_not_proposed_again() -> None:
    packet = alfworld_nothing_packet()
    teacher = TemplateTeacher()
    first = teacher.proposals(packet, 1, seed=3)[0]
    assert "snap_admissible" in first.templates
    live_code = first.patch.code_for(HookName.PRE_ACTION)
    assert live_code is not None
    live = packet.model_copy(
        update={"incumbent": [IncumbentHook(hook=HookName.PRE_ACTION, links=1, code=live_code)]}
    )
    proposals = teacher.proposals(live, 6, seed=3)
    running = set(first.templates) & {
        t.name for t in TEMPLATES.values() if t.hook == HookName.PRE_ACTION
    }
    assert running and all(not running & set(p.templates) for p in proposals)
    assert all(h.mode == HookMode.ADD for p in proposals for h in p.patch.hooks)


def test_when_only_live_templates_apply_they_are_proposed_as_replacements() -> None:
    packet = alfworld_nothing_packet()
    teacher = TemplateTeacher()
    everything = [t for t, _ in teacher.rank(packet)]
    rendered = {
        hook: "\n".join(
            t.render(t.defaults(), RenderContext(env="alfworld"), function=f"r{i}")
            for i, t in enumerate(everything)
            if t.hook == hook
        )
        for hook in {t.hook for t in everything}
    }
    live = packet.model_copy(
        update={
            "incumbent": [
                IncumbentHook(hook=hook, links=1, code=code) for hook, code in rendered.items()
            ]
        }
    )
    assert teacher.rank(live) == []
    proposals = teacher.proposals(live, 3, seed=1)
    assert all(h.mode == HookMode.REPLACE for p in proposals for h in p.patch.hooks)


@pytest.mark.parametrize("env", ENVS)
def test_choices_in_reads_back_every_value_of_every_parameter(env: str) -> None:
    """A deployed patch's description names its templates with their parameters: read back,
    they re-render the same patch (how the benchmark keeps part of an incumbent). Every value
    of every parameter once, so a default cannot hide a value that does not read back."""
    teacher = TemplateTeacher()
    for template in sorted(TEMPLATES.values(), key=lambda t: t.name):
        if not template.applies_to(env):
            continue
        for param in template.params:
            for value in param.values():
                choice = TemplateChoice.of(template.name, {param.name: value})
                patch = teacher.render_patch(env, [choice])
                assert choices_in(patch.description) == [choice], choice.label()
                assert teacher.render_patch(env, choices_in(patch.description)) == patch


def test_choices_in_keeps_the_order_and_refuses_what_would_not_read_back() -> None:
    chosen = [
        TemplateChoice.of("ws_force_search", {"max_words": 6}),
        TemplateChoice.of("ws_click_best", {"min_similarity": 0.2, "search": False}),
        TemplateChoice.of("ws_pick_options", {"buy": False}),
    ]
    description = TemplateTeacher().render_patch("webshop", chosen).description
    assert choices_in(description) == chosen
    assert choices_in("a hand-written fix (no templates)") == []
    with pytest.raises(ValueError, match="without its parameters"):
        choices_in("templates: ws_force_search. A search.")
    with pytest.raises(ValueError, match="not one of its values"):
        choices_in("templates: ws_pick_options. ws_pick_options(buy=maybe, threshold=0.6).")
    with pytest.raises(ValueError, match="not one of its values"):
        choices_in("templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.65).")


def webshop_stalled_on_item_packet() -> FailurePacket:
    """The search and the item were clicked (an incumbent's work), then prose on the item page."""
    prose = (
        "You can use the search action to find it.",
        "Invalid action 'You can...'",
        ["invalid"],
    )
    steps = [("search[red shirt]", "results ...", []), ("click[ASIN-2]", "item page", [])]
    episodes = [
        _episode(
            "shirts",
            "i need a red shirt, and price lower than 30.00 dollars",
            [*steps, prose, prose],
        ),
        _episode(
            "candles", "i want soy candles, and price lower than 20.00 dollars", [*steps, prose]
        ),
    ]
    return _packet("webshop", episodes, invalid_actions=3, repeated_actions=1, step_limit_hits=2)


def _with_snippet(packet: FailurePacket, action: str, flags: list[str]) -> FailurePacket:
    """Every episode of `packet` with one more step."""
    step = Snippet(step=9, action=action, observation="", flags=flags)
    episodes = [e.model_copy(update={"snippets": [*e.snippets, step]}) for e in packet.episodes]
    return packet.model_copy(update={"episodes": episodes})


def test_a_packet_stalled_on_the_item_page_ranks_finishing_the_purchase_first() -> None:
    """An agent that opens an item and never buys needs the purchase finished for it: the
    generic format fixes (snap, veto, reminders) would leave the decision to the model."""
    from harness_r1.trainer.templates import packet_features

    packet = webshop_stalled_on_item_packet()
    assert packet_features(packet)["never_bought"] == 1.0
    assert TemplateTeacher().rank(packet)[0][0].name == "ws_pick_options"
    bought = _with_snippet(packet, "click[buy now]", [])
    assert packet_features(bought)["never_bought"] == 0.0
    refused = _with_snippet(packet, "click[buy now]", ["invalid"])  # an invalid buy is no buy
    assert packet_features(refused)["never_bought"] == 1.0
    won = packet.model_copy(
        update={"episodes": [e.model_copy(update={"success": True}) for e in packet.episodes]}
    )
    assert packet_features(won)["never_bought"] == 0.0
    assert packet_features(webshop_click_packet())["never_bought"] == 0.0  # no item opened


def test_never_bought_is_a_webshop_signal_only() -> None:
    from harness_r1.trainer.templates import packet_features

    stalled = webshop_stalled_on_item_packet()
    elsewhere = stalled.model_copy(update={"env": "alfworld"})
    assert packet_features(elsewhere)["never_bought"] == 0.0
    unopened = stalled.model_copy(
        update={
            "episodes": [
                e.model_copy(
                    update={
                        "snippets": [
                            s.model_copy(update={"flags": ["invalid"]}) if "ASIN" in s.action else s
                            for s in e.snippets
                        ]
                    }
                )
                for e in stalled.episodes
            ]
        }
    )
    assert packet_features(unopened)["never_bought"] == 0.0  # the item click was refused


def test_every_template_says_whether_it_advises_or_solves() -> None:
    """A template that returns a force plays the task for the model: it must be a solver; the
    advisory ones (skills, notes, hints, vetoes, rewrites of the model's own proposal,
    recovery) never force, at any parameter value."""
    roles = {name: t.role for name, t in TEMPLATES.items()}
    assert set(roles.values()) == {"advisory", "solver"}
    for name, template in TEMPLATES.items():
        env = sorted(template.envs)[0] if template.envs else "dbbench"
        rendered = [_render(name, env, **params) for params in _param_grid(name)]
        forces = any(re.search(r"""['"]effect['"]: ['"]force['"]""", code) for code in rendered)
        assert forces == (template.role == "solver"), name
    assert library_table()[0]["role"] in ("advisory", "solver")


@pytest.mark.parametrize("env", ENVS)
def test_the_advisory_teacher_offers_advisory_templates_only(env: str) -> None:
    advisory = TemplateTeacher(TeacherConfig(advisory=True))
    default = TemplateTeacher()
    for packet in (PACKETS[env](), quiet_packet(env)):
        offered = {t.name for t, _ in advisory.rank(packet)}
        assert offered and all(TEMPLATES[name].role == "advisory" for name in offered)
        for proposal in advisory.proposals(packet, 6, seed=0):
            assert all(TEMPLATES[name].role == "advisory" for name in proposal.templates)
    # the default profile still offers the solvers where the signals call for them
    solvers = {t.name for p in PACKETS.values() for t, _ in default.rank(p()) if t.role == "solver"}
    assert solvers
