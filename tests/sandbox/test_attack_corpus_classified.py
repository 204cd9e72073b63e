"""The attack corpus's CLASSIFIED table: hooks that run harmlessly in the worker and return
junk (values no effect can be made of, effects a hook point may not request, state that cannot
be kept, outputs over a limit) that the runtime classifies as a fault while a real episode
(the tiny episode world of attack_corpus_rig.py, ScriptedPolicy, IsolatedHooks) goes on."""

from __future__ import annotations

import pytest
from attack_corpus_rig import (
    EPISODE_START,
    POST_FEEDBACK,
    PRE_ACTION,
    PRE_DECISION,
    ROOMY,
    TASK,
    Classified,
    DoorPrompter,
    Host,
    hook,
    run_episode,
)
from executor_rig import pid_gone

from harness_r1.contracts import Termination
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

CLASSIFIED: list[Classified] = [
    # -- junk return values --------------------------------------------------------------------
    Classified("a_set", PRE_ACTION, hook("return {'open door'}"), "junk", "set"),
    Classified("a_function", PRE_ACTION, hook("return hook"), "junk", "function"),
    Classified("nan", PRE_ACTION, hook("return float('nan')"), "junk", "Out of range float"),
    Classified("minus_inf", POST_FEEDBACK, hook("return float('-inf')"), "junk", "Out of range"),
    Classified("a_bool", PRE_ACTION, hook("return True"), "junk", "returned bool"),
    Classified("a_big_int", PRE_ACTION, hook("return 1 << 20000"), "junk", "4300 digits"),
    Classified(
        "non_string_keys",
        PRE_ACTION,
        hook("return {1: 'open door', None: 'force'}"),
        "junk",
        "unknown effect None",
    ),
    Classified(
        "nested_huge_dict",
        PRE_ACTION,
        hook("d = {'effect': 'force'}\nfor i in range(1000):\n    d = {'effect': d}\nreturn d"),
        "junk",
        "RecursionError",
    ),
    Classified(
        "text_is_a_dict",
        PRE_DECISION,
        hook("return {'effect': 'message', 'text': {'a': 1}}"),
        "junk",
        "must be a string",
    ),
    Classified(
        "force_without_an_action",
        PRE_ACTION,
        hook("return {'effect': 'force', 'text': '   '}"),
        "junk",
        "non-empty action",
    ),
    Classified(
        "unknown_effect",
        POST_FEEDBACK,
        hook("return {'effect': 'teleport', 'text': 'open door'}"),
        "junk",
        "unknown effect 'teleport'",
    ),
    # -- effects the hook point may not request ------------------------------------------------
    Classified(
        "pre_action_hint",
        PRE_ACTION,
        hook("return {'effect': 'hint', 'text': 'open door'}"),
        "junk",
        "may not request hint",
    ),
    Classified(
        "post_feedback_rewrite",
        POST_FEEDBACK,
        hook("return {'effect': 'rewrite', 'text': 'open door'}"),
        "junk",
        "may not request rewrite",
    ),
    Classified(
        "pre_decision_force",
        PRE_DECISION,
        hook("return {'effect': 'force', 'text': 'open door'}"),
        "junk",
        "may not request force",
    ),
    Classified(
        "episode_start_force",
        EPISODE_START,
        hook("return {'effect': 'force', 'action': 'open door'}"),
        "junk",
        "unknown keys: action",
    ),
    Classified(
        "episode_start_list",
        EPISODE_START,
        hook("return ['open door']"),
        "junk",
        "expected None, str or dict",
    ),
    Classified(
        "episode_start_skills_not_text",
        EPISODE_START,
        hook("return {'skills': [1, 2]}"),
        "junk",
        "must be a string",
    ),
    # -- state poisoning and oversized outputs -------------------------------------------------
    Classified(
        "state_with_a_tuple_key",
        PRE_ACTION,
        hook("state[(1, 2)] = 'x'\nreturn None"),
        "junk",
        "keys must be str",
    ),
    Classified(
        "state_with_a_set",
        POST_FEEDBACK,
        hook("state['seen'] = {'look'}\nreturn None"),
        "junk",
        "set is not JSON serializable",
    ),
    Classified(
        "initial_state_not_a_dict",
        EPISODE_START,
        hook("return {'state': ['x']}"),
        "junk",
        "state must be a dict",
    ),
    Classified(
        "state_over_the_runtime_limit",
        PRE_DECISION,
        hook("state['blob'] = 'a' * 100000\nreturn None"),
        "junk",
        "the limit is 64000",
    ),
    Classified(
        "effect_text_over_the_runtime_limit",
        PRE_DECISION,
        hook("return 'a' * 100000"),
        "junk",
        "the limit is 4000",
    ),
    Classified(
        "ten_megabyte_hint",
        POST_FEEDBACK,
        hook("n = 10 ** 7\nreturn 'a' * n"),
        "oversized",
        "the limit is 262144",
    ),
    Classified(
        "ten_megabyte_state",
        PRE_ACTION,
        hook(
            "n = 10 ** 7\nstate['blob'] = 'a' * n\nreturn {'effect': 'force', 'text': 'open door'}"
        ),
        "oversized",
        "the limit is 262144",
    ),
]


@pytest.mark.parametrize("case", CLASSIFIED, ids=[c.name for c in CLASSIFIED])
def test_junk_is_a_fault_and_the_episode_goes_on(case: Classified, host: Host) -> None:
    config = SandboxConfig(call_budget_s=ROOMY)
    with IsolatedHooks.from_sources({case.hook: case.code}, config) as hs:
        trajectory, env, systems = run_episode(hs, ["ACTION: look", "ACTION: open door"])
        pid = hs.worker_pid
    # Nothing the hook returned took effect: the model's own actions ran and won.
    assert env.actions == ["look", "open door"]
    assert trajectory.outcome.success and trajectory.outcome.termination == Termination.SUCCESS
    assert trajectory.outcome.steps == 2
    if case.hook == EPISODE_START:
        faults, effects = trajectory.episode_start_faults, trajectory.episode_start_effects
        assert systems[0] == DoorPrompter().system_prompt(TASK)
    else:
        faults, effects = trajectory.steps[0].faults, trajectory.steps[0].effects
    assert [(f.hook, f.reason) for f in faults] == [(case.hook, case.reason)]
    assert case.detail in faults[0].detail, faults[0].detail
    assert effects == []
    if case.hook in (PRE_DECISION, PRE_ACTION):  # called again on the final step
        assert [(f.hook, f.reason) for f in trajectory.steps[1].faults] == [
            (case.hook, case.reason)
        ]
    assert hs.events["restarts"] == 0 and pid is not None and pid_gone(pid)
    assert len(trajectory.to_json_bytes()) < 100_000  # the record stays publishable
    host.assert_intact()
