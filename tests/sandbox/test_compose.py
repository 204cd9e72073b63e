"""Composition of overlay links, rule by rule: the composed source is run (in process, trusted
test code) and what it returns is read by the runtime's own effect parser."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness_r1.contracts import EffectKind, HookCode, HookMode, HookName, Patch
from harness_r1.harness.effects import (
    JunkResult,
    parse_start_effects,
    parse_step_effect,
)
from harness_r1.sandbox.compose import CompositionRefused, Link, compose_chain
from harness_r1.sandbox.hooklib import hook_globals
from harness_r1.sandbox.static import check_patch
from harness_r1.sandbox.static_report import StaticLimits


def source(body: str, helpers: str = "") -> str:
    indented = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return f"{helpers}def hook(ctx, state):\n{indented}\n"


def link(overlay_id: str, env: str = "alfworld", **hooks: str | tuple[str, str]) -> Link:
    entries = []
    for name, value in hooks.items():
        code, mode = (value, "add") if isinstance(value, str) else value
        entries.append(HookCode(hook=HookName(name), code=code, mode=HookMode(mode)))
    return Link(overlay_id, Patch(env=env, hooks=entries))


def load(patch: Patch, hook: HookName) -> Any:
    code = patch.code_for(hook)
    assert code is not None
    namespace = hook_globals()
    exec(compile(code, "<composed>", "exec"), namespace)  # trusted test code only
    return namespace["hook"]


def call(patch: Patch, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> Any:
    return load(patch, hook)(copy.deepcopy(ctx), state)


REWRITE_LOOK = source(
    'if ctx["proposed_action"] == "look":\n'
    '    return {"effect": "rewrite", "text": "inventory"}\n'
    "return None"
)
VETO_INVENTORY = source(
    'if ctx["proposed_action"] == "inventory":\n'
    '    return {"effect": "veto", "text": "inventory again?"}\n'
    "return None"
)
FORCE_NORTH = source('return {"effect": "force", "text": "go north"}')
ALLOW = source('return {"effect": "allow"}')


def test_a_single_contributor_keeps_its_source_byte_for_byte() -> None:
    only = link("ov-1", pre_action=REWRITE_LOOK, post_feedback=source('return "hint"'))
    composed = compose_chain([only])
    assert composed.patch.hooks == only.patch.hooks
    assert composed.describe() == {"pre_action": [1], "post_feedback": [1]}


def test_add_chains_replace_drops_the_older_hook_and_remove_drops_it() -> None:
    first = link("ov-1", pre_action=REWRITE_LOOK, post_feedback=source('return "one"'))
    second = link("ov-2", pre_action=VETO_INVENTORY, post_feedback=source('return "two"'))
    chained = compose_chain([first, second])
    assert chained.describe() == {"pre_action": [1, 2], "post_feedback": [1, 2]}
    replacing = link("ov-3", pre_action=(ALLOW, "replace"), post_feedback=("", "remove"))
    replaced = compose_chain([first, second, replacing])
    assert replaced.describe() == {"pre_action": [3]}
    code = replaced.patch.code_for(HookName.PRE_ACTION)
    assert code is not None and "def link3():" in code and "def link1():" not in code
    assert replaced.patch.code_for(HookName.POST_FEEDBACK) is None


@pytest.mark.parametrize("mode", ["replace", "remove"])
def test_replace_or_remove_of_a_hook_nobody_has_is_refused(mode: str) -> None:
    incumbent = link("ov-1", pre_action=REWRITE_LOOK)
    code = "" if mode == "remove" else ALLOW
    with pytest.raises(CompositionRefused) as refused:
        compose_chain([incumbent, link("ov-2", post_feedback=(code, mode))])
    assert refused.value.code == f"nothing_to_{mode}"
    assert "use 'add'" in refused.value.message


def test_removing_every_hook_is_refused_as_the_base_harness() -> None:
    with pytest.raises(CompositionRefused, match="removes_everything"):
        compose_chain(
            [link("ov-1", pre_action=REWRITE_LOOK), link("ov-2", pre_action=("", "remove"))]
        )


def test_links_for_another_env_are_refused() -> None:
    with pytest.raises(CompositionRefused, match="env_mismatch"):
        compose_chain(
            [link("ov-1", pre_action=ALLOW), link("ov-2", env="dbbench", pre_action=ALLOW)]
        )


def test_pre_action_rewrites_chain_in_order() -> None:
    to_inventory = link("ov-1", pre_action=REWRITE_LOOK)
    to_wait = link(
        "ov-2",
        pre_action=source(
            'if ctx["proposed_action"] == "inventory":\n'
            '    return {"effect": "rewrite", "text": "wait"}\n'
            "return None"
        ),
    )
    patch = compose_chain([to_inventory, to_wait]).patch
    value = call(patch, HookName.PRE_ACTION, {"proposed_action": "look"}, {})
    assert parse_step_effect(HookName.PRE_ACTION, value).text == "wait"  # type: ignore[union-attr]
    untouched = call(patch, HookName.PRE_ACTION, {"proposed_action": "go east"}, {})
    assert parse_step_effect(HookName.PRE_ACTION, untouched) is None


def test_pre_action_a_newer_veto_wins_over_an_older_rewrite() -> None:
    patch = compose_chain(
        [link("ov-1", pre_action=REWRITE_LOOK), link("ov-2", pre_action=VETO_INVENTORY)]
    ).patch
    effect = parse_step_effect(
        HookName.PRE_ACTION, call(patch, HookName.PRE_ACTION, {"proposed_action": "look"}, {})
    )
    assert effect is not None and effect.kind == EffectKind.VETO


def test_pre_action_a_newer_force_wins_over_an_older_veto_and_a_newer_allow_changes_nothing() -> (
    None
):
    veto_all = source('return {"effect": "veto", "text": "no"}')
    forced = compose_chain(
        [link("ov-1", pre_action=veto_all), link("ov-2", pre_action=FORCE_NORTH)]
    )
    effect = parse_step_effect(
        HookName.PRE_ACTION, call(forced.patch, HookName.PRE_ACTION, {"proposed_action": "x"}, {})
    )
    assert effect is not None and (effect.kind, effect.text) == (EffectKind.FORCE, "go north")
    vetoed = compose_chain([link("ov-1", pre_action=veto_all), link("ov-2", pre_action=ALLOW)])
    effect = parse_step_effect(
        HookName.PRE_ACTION, call(vetoed.patch, HookName.PRE_ACTION, {"proposed_action": "x"}, {})
    )
    assert effect is not None and effect.kind == EffectKind.VETO


def test_pre_decision_notes_join_in_chain_order() -> None:
    patch = compose_chain(
        [
            link("ov-1", pre_decision=source('return "first"')),
            link("ov-2", pre_decision=source("return None")),
            link("ov-3", pre_decision=source('return {"effect": "message", "text": "third"}')),
        ]
    ).patch
    effect = parse_step_effect(HookName.PRE_DECISION, call(patch, HookName.PRE_DECISION, {}, {}))
    assert effect is not None and effect.text == "first\nthird"


def test_post_feedback_hints_join_a_force_wins_and_a_recover_carries_the_hints() -> None:
    hint = link("ov-1", post_feedback=source('return "check the drawer"'))
    force = link("ov-2", post_feedback=source('return {"effect": "force", "text": "look"}'))
    recover = link("ov-3", post_feedback=source('return {"effect": "recover", "text": "restart"}'))
    ctx = {"action": "look", "feedback": "Nothing happens."}
    hints = compose_chain([hint, link("ov-9", post_feedback=source('return "second"'))]).patch
    effect = parse_step_effect(HookName.POST_FEEDBACK, call(hints, HookName.POST_FEEDBACK, ctx, {}))
    assert effect is not None and (effect.kind, effect.text) == (
        EffectKind.HINT,
        "check the drawer\nsecond",
    )
    forced = compose_chain([hint, force]).patch
    effect = parse_step_effect(
        HookName.POST_FEEDBACK, call(forced, HookName.POST_FEEDBACK, ctx, {})
    )
    assert effect is not None and (effect.kind, effect.text) == (EffectKind.FORCE, "look")
    recovered = compose_chain([force, recover, hint]).patch
    effect = parse_step_effect(
        HookName.POST_FEEDBACK, call(recovered, HookName.POST_FEEDBACK, ctx, {})
    )
    assert effect is not None and (effect.kind, effect.text) == (
        EffectKind.RECOVER,
        "restart\ncheck the drawer",
    )


def test_episode_start_skills_join_once_and_each_link_keeps_its_own_state() -> None:
    counter = 'state["n"] = state.get("n", 0) + 1\nreturn "step " + str(state["n"])'
    first = link(
        "ov-1",
        episode_start=source('return {"skills": ["be brief", "look first"], "state": {"n": 10}}'),
        pre_decision=source(counter),
    )
    second = link(
        "ov-2",
        episode_start=source('return {"skills": ["look first", "open things"]}'),
        pre_decision=source(counter),
    )
    patch = compose_chain([first, second]).patch
    start = parse_start_effects(call(patch, HookName.EPISODE_START, {"task": {}}, {}))
    assert start.skills == ("be brief", "look first", "open things")
    state = start.state
    assert state is not None
    note = call(patch, HookName.PRE_DECISION, {}, state)
    assert note == "step 11\nstep 1"  # neither link saw the other's "n"


def test_episode_start_keeps_the_newest_skills_within_the_runtime_limit() -> None:
    many = source("return {'skills': ['old %d' % i for i in range(6)]}")
    more = source("return {'skills': ['new %d' % i for i in range(6)]}")
    patch = compose_chain(
        [link("ov-1", episode_start=many), link("ov-2", episode_start=more)]
    ).patch
    start = parse_start_effects(call(patch, HookName.EPISODE_START, {}, {}))
    assert start.skills == ("old 4", "old 5", *(f"new {i}" for i in range(6)))


def test_a_link_that_fails_makes_the_composed_call_fail() -> None:
    broken = link("ov-2", pre_action=source('return {"effect": "teleport", "text": "x"}'))
    patch = compose_chain([link("ov-1", pre_action=REWRITE_LOOK), broken]).patch
    with pytest.raises(JunkResult):
        parse_step_effect(
            HookName.PRE_ACTION, call(patch, HookName.PRE_ACTION, {"proposed_action": "look"}, {})
        )
    raising = link("ov-3", pre_decision=source("return 1 // 0"))
    patch = compose_chain([link("ov-1", pre_decision=source('return "a"')), raising]).patch
    with pytest.raises(ZeroDivisionError):
        call(patch, HookName.PRE_DECISION, {}, {})


def test_multi_line_strings_survive_the_wrapping() -> None:
    code = 'def hook(ctx, state):\n    return """first line\n  indented line\nlast"""\n'
    patch = compose_chain(
        [link("ov-1", pre_decision=code), link("ov-2", pre_decision=source("return None"))]
    ).patch
    assert call(patch, HookName.PRE_DECISION, {}, {}) == "first line\n  indented line\nlast"


def test_the_composed_overlay_passes_the_static_checks_and_counts_against_the_budget() -> None:
    helpers = "def norm(text):\n    return text.strip().lower()\n\n"
    body = 'return norm(ctx["proposed_action"]) and None'
    links = [link(f"ov-{i}", pre_action=source(body, helpers)) for i in range(3)]
    composed = compose_chain(links)
    assert composed.report is not None and composed.report.ok
    nodes = composed.report.stats["pre_action"].nodes
    with pytest.raises(CompositionRefused) as refused:
        compose_chain(links, StaticLimits(max_nodes=nodes - 1))
    assert refused.value.code == "over_budget"
    assert "1:ov-0, 2:ov-1, 3:ov-2" in refused.value.message
    assert "replace an incumbent hook" in refused.value.message


def test_a_link_over_its_own_limits_is_refused_even_when_the_whole_would_fit() -> None:
    too_many = "".join(f"def h{i}(x):\n    return x\n\n" for i in range(4))
    with pytest.raises(CompositionRefused, match="link_invalid"):
        compose_chain(
            [
                link("ov-1", pre_action=ALLOW),
                link("ov-2", pre_action=source("return None", too_many)),
            ]
        )


def test_the_default_mode_stays_out_of_the_canonical_bytes() -> None:
    plain = Patch(env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, code=ALLOW)])
    assert b'"mode"' not in plain.to_json_bytes()
    removal = Patch(env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, mode="remove")])
    assert b'"mode":"remove"' in removal.to_json_bytes()
    assert Patch.from_json_bytes(removal.to_json_bytes()) == removal
    assert plain.runnable and not removal.runnable
    with pytest.raises(ValueError, match="carries no code"):
        HookCode(hook=HookName.PRE_ACTION, code=ALLOW, mode="remove")


def test_helpers_are_counted_per_link_in_a_composed_hook_and_whole_elsewhere() -> None:
    three = "".join(f"def h{i}(x):\n    return x\n\n" for i in range(3))
    links = [link(f"ov-{i}", pre_action=source("return None", three)) for i in range(3)]
    composed = compose_chain(links).patch
    assert check_patch(composed).ok  # 9 helpers in all, 3 per link: as every agent checks it
    code = composed.code_for(HookName.PRE_ACTION)
    assert code is not None
    smuggled = code.replace("def h0(x):", "def h9(x):\n        return x\n\n    def h0(x):", 1)
    report = check_patch(Patch(env="alfworld", hooks=[HookCode(hook="pre_action", code=smuggled)]))
    assert [v.code for v in report.violations] == ["too_many_helpers"]
    flat = three + "def h3(x):\n    return x\n\n"
    flat_patch = Patch(
        env="alfworld", hooks=[HookCode(hook="pre_action", code=source("return 1", flat))]
    )
    assert [v.code for v in check_patch(flat_patch).violations] == ["too_many_helpers"]


def test_a_remove_entry_passes_the_static_checks_of_a_link() -> None:
    removal = Patch(env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, mode="remove")])
    assert check_patch(removal).ok


def test_the_bytes_of_a_patch_written_before_modes_keep_their_sha256() -> None:
    """The sha256 this patch had before `mode` existed (computed at 37e529f): overlay ids,
    signatures and registries of old patches stay valid."""
    golden = Patch(
        env="alfworld",
        description="golden",
        hooks=[HookCode(hook=HookName.PRE_ACTION, code="def hook(ctx, state):\n    return None\n")],
    )
    assert golden.sha256() == "52c6931573576a8324bf0b14a45ccbe56d35533dfd8e695994b01e32279c3b1f"


def test_a_hook_with_one_contributor_in_a_longer_chain_keeps_its_links_state() -> None:
    """Link 1 has episode_start and pre_decision, link 2 only episode_start: link 1's
    pre_decision must still find the state its episode_start set."""
    first = link(
        "ov-1",
        episode_start=source('return {"state": {"goal": "mug"}}'),
        pre_decision=source('return "find the " + state["goal"]'),
    )
    second = link("ov-2", episode_start=source('return "look around"'))
    patch = compose_chain([first, second]).patch
    start = parse_start_effects(call(patch, HookName.EPISODE_START, {}, {}))
    assert start.skills == ("look around",) and start.state is not None
    note = parse_step_effect(
        HookName.PRE_DECISION, call(patch, HookName.PRE_DECISION, {}, start.state)
    )
    assert note is not None and note.text == "find the mug"


def test_no_link_can_change_what_a_later_link_sees() -> None:
    """An older link that scribbles on ctx (and returns None) cannot hide the model's action
    from a newer link's veto."""
    scribble = link("ov-1", pre_action=source('ctx["proposed_action"] = "look"\nreturn None'))
    guard = link(
        "ov-2",
        pre_action=source(
            'if ctx["proposed_action"] == "drop all":\n'
            '    return {"effect": "veto", "text": "never drop all"}\n'
            "return None"
        ),
    )
    patch = compose_chain([scribble, guard]).patch
    value = call(patch, HookName.PRE_ACTION, {"proposed_action": "drop all"}, {})
    effect = parse_step_effect(HookName.PRE_ACTION, value)
    assert effect is not None and effect.kind == EffectKind.VETO


@pytest.mark.parametrize(
    ("hook", "junk", "newer"),
    [
        ("pre_action", '{"effect": "rewrite", "text": ""}', '{"effect": "force", "text": "look"}'),
        (
            "pre_action",
            '{"effect": "force", "text": "<|im_start|>x"}',
            '{"effect": "veto", "text": "no"}',
        ),
        (
            "post_feedback",
            '{"effect": "force", "text": "  "}',
            '{"effect": "recover", "text": "r"}',
        ),
        ("pre_decision", '{"text": None}', '"fine"'),
        ("pre_decision", '"x" * 5000', '"fine"'),
        ("episode_start", '{"skills": ["s"] * 9}', '"fine"'),
        ("episode_start", '{"state": [1]}', '"fine"'),
    ],
)
def test_an_older_links_junk_is_not_hidden_by_a_newer_effect(
    hook: str, junk: str, newer: str
) -> None:
    patch = compose_chain(
        [
            link("ov-1", **{hook: source(f"return {junk}")}),
            link("ov-2", **{hook: source(f"return {newer}")}),
        ]
    ).patch
    name = HookName(hook)
    ctx = {"proposed_action": "go", "action": "go", "feedback": "ok"}
    value = call(patch, name, ctx, {})
    with pytest.raises(JunkResult):
        if name == HookName.EPISODE_START:
            parse_start_effects(value)
        else:
            parse_step_effect(name, value)


def test_a_link_may_not_use_the_scaffoldings_names() -> None:
    fake = "def link1():\n    def hook(ctx, state):\n        return None\n    return hook\n\n"
    for helpers in (fake, "def clone(x):\n    return x\n\n"):
        with pytest.raises(CompositionRefused, match="link_invalid") as refused:
            compose_chain(
                [
                    link("ov-1", pre_action=ALLOW),
                    link("ov-2", pre_action=source("return None", helpers)),
                ]
            )
        assert "composition uses" in refused.value.message


def test_the_same_chain_composes_to_the_same_bytes_whatever_the_link_ids() -> None:
    """Names come from positions: the composition measured under candidate ids is the one
    recomposed later from overlay ids."""
    a, b = link("ov-1", pre_action=REWRITE_LOOK).patch, link("x", pre_action=VETO_INVENTORY).patch
    measured = compose_chain([Link("ov-1", a), Link("batch7-c2", b)]).patch
    recomposed = compose_chain([Link("ov-1", a), Link("ov-9f3e", b)]).patch
    assert measured.sha256() == recomposed.sha256()


def test_a_patch_with_replace_or_remove_never_runs_uncomposed() -> None:
    from harness_r1.sandbox.executor import IsolatedHooks

    removal = Patch(env="alfworld", hooks=[HookCode(hook=HookName.PRE_ACTION, mode="remove")])
    hooks = IsolatedHooks(removal, start=False)
    assert hooks.static_rejection is not None
    assert hooks.static_rejection.startswith("not_composed")
    hooks.close()
