"""Templates for any env: snapping to admissible commands, repeat vetoes, loop recovery, format
and progress reminders, hints after invalid actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_r1.contracts import HookName
from harness_r1.trainer.templates.base import (
    ChoiceParam,
    Features,
    FloatParam,
    IntParam,
    RenderContext,
    Template,
    fill,
    lit,
)

#: How each env wants its actions written (format reminders and invalid-action hints).
FORMAT_TEXT: dict[str, str] = {
    "alfworld": (
        "Answer with two lines: THOUGHT: <short reason> then ACTION: <one command copied "
        "exactly from AVAILABLE ACTIONS>."
    ),
    "dbbench": (
        "Answer with Action: Operation and one SQL statement in a ```sql block, or with "
        'Action: Answer and Final Answer: ["value", ...] when you know the answer.'
    ),
    "webshop": (
        "Answer with Thought: <short reason> then Action: search[keywords] on the search page "
        "or click[value] with a value from the available actions."
    ),
}
DEFAULT_FORMAT = "Answer with exactly one action in the format the task asks for."

#: What "finish now" means per env (progress reminders).
FINISH_TEXT: dict[str, str] = {
    "alfworld": "go straight to the target receptacle and finish the task",
    "dbbench": 'commit now with Action: Answer and Final Answer: ["value", ...]',
    "webshop": "pick the options the instruction names and click[buy now]",
}
DEFAULT_FINISH = "finish the task now"

REPEAT_MESSAGES = (
    "You just did exactly that and it did not help. Choose a different action.",
    "Repeating the same action will not change anything; try another one.",
    "That action was already tried several times in a row. Pick a new action that makes progress.",
)
RECOVER_MESSAGES = (
    "You are going in circles. Start again from the task with a short plan and new actions.",
    "The last actions repeat without progress. Re-read the task and act differently.",
)


def _snap(p: Mapping[str, Any], rc: RenderContext) -> str:
    fallback = ""
    if p["fallback"] == "veto":
        fallback = (
            '\n    return {"effect": "veto", "text": "Use one of these actions exactly: " + '
            '", ".join(choices[:12])}'
        )
    else:
        fallback = "\n    return None"
    code = '''
def @@fn@@(ctx, state):
    """Replace an action that is not admissible by the closest admissible one."""
    actions = ctx["admissible_actions"] or []
    proposed = ctx["proposed_action"].strip()
    if not actions or proposed in actions:
        return None
    if proposed.startswith("search[") and "search[<your query>]" in actions:
        return None
    choices = [a for a in actions if a != "search[<your query>]"]
    best = closest(proposed, choices, @@cutoff@@)
    if best:
        return {"effect": "rewrite", "text": best}@@fallback@@
'''
    return fill(code, cutoff=lit(p["cutoff"]), fallback=fallback)


def _snap_steer(f: Features) -> dict[str, Any]:
    return {
        "cutoff": 0.4 if max(f["invalid"], f["nothing"]) >= 0.6 else 0.55,
        "fallback": "veto" if f["repeated"] >= 0.5 else "allow",
    }


def _veto_repeat(p: Mapping[str, Any], rc: RenderContext) -> str:
    code = '''
def @@fn@@(ctx, state):
    """Veto an action repeated more than @@limit_text@@ time(s) in a row."""
    proposed = ctx["proposed_action"].strip()
    if not proposed or proposed != ctx["last_action"]:
        return None
    run = ctx["counters"]["repeated_action_streak"] + 2
    if run <= @@limit@@:
        return None
    return {"effect": "veto", "text": @@message@@ + " (" + proposed[:80] + ")"}
'''
    return fill(
        code,
        limit=lit(p["max_in_a_row"]),
        limit_text=str(p["max_in_a_row"]),
        message=lit(REPEAT_MESSAGES[p["message"]]),
    )


def _recover(p: Mapping[str, Any], rc: RenderContext) -> str:
    code = '''
def @@fn@@(ctx, state):
    """Restart the context after a streak of repeated, invalid or fruitless actions."""
    counters = ctx["counters"]
    run = max(counters["repeated_action_streak"] + 1, counters["invalid_streak"],
              counters["nothing_happens_streak"])
    if run < @@streak@@ or ctx["step"] - state.get("recovered_at", -100) < @@streak@@:
        return None
    state["recovered_at"] = ctx["step"]
    task = ctx["task"]["instruction"][:300]
    return {"effect": "recover", "text": @@message@@ + " Task: " + task}
'''
    return fill(code, streak=lit(p["streak"]), message=lit(RECOVER_MESSAGES[p["message"]]))


def _format(p: Mapping[str, Any], rc: RenderContext) -> str:
    text = FORMAT_TEXT.get(rc.env, DEFAULT_FORMAT)
    lines = ['    """Remind the model of the action format."""']
    if p["when"] == "after_invalid":
        lines += [
            '    if not ctx["info"].get("invalid_action") and ctx["step"] > 0:',
            "        return None",
        ]
    lines.append(f"    note = {lit(text)}")
    if p["show_actions"]:
        lines += [
            '    actions = ctx["admissible_actions"] or []',
            "    if actions:",
            f'        note += " For example: " + ", ".join(actions[:{p["show_actions"]}])',
        ]
    lines.append("    return note")
    return "def @@fn@@(ctx, state):\n" + "\n".join(lines)


def _progress(p: Mapping[str, Any], rc: RenderContext) -> str:
    finish = FINISH_TEXT.get(rc.env, DEFAULT_FINISH)
    code = '''
def @@fn@@(ctx, state):
    """Warn when the step budget runs out."""
    left = ctx["remaining_steps"]
    if left > @@warn_at@@:
        return None
    return "Only " + str(left) + " step(s) left: " + @@finish@@ + "."
'''
    return fill(code, warn_at=lit(p["warn_at"]), finish=lit(finish))


def _invalid_hint(p: Mapping[str, Any], rc: RenderContext) -> str:
    text = FORMAT_TEXT.get(rc.env, DEFAULT_FORMAT)
    code = '''
def @@fn@@(ctx, state):
    """After an invalid action, say what is valid now."""
    if not ctx["info"].get("invalid_action") and ctx["feedback"].strip() != "Nothing happens.":
        return None
    actions = [a for a in (ctx["admissible_actions"] or []) if a != ctx["action"]]
    if not actions:
        return "That action was not valid. " + @@format@@
    return "That action was not valid. Valid now: " + ", ".join(actions[:@@shown@@])
'''
    return fill(code, format=lit(text), shown=lit(p["shown"]))


TEMPLATES: tuple[Template, ...] = (
    Template(
        name="snap_admissible",
        role="advisory",
        hook=HookName.PRE_ACTION,
        envs=frozenset({"alfworld", "webshop"}),
        params=(
            FloatParam("cutoff", 0.3, 0.9, 0.5, 0.05, "least similarity to snap"),
            ChoiceParam("fallback", ("allow", "veto"), "allow", "when nothing is close"),
        ),
        build=_snap,
        weights={"invalid": 2.0, "nothing": 2.0, "always": 0.2},
        purpose="snap each proposed action to the closest admissible command",
        order=25,
        steer=_snap_steer,
    ),
    Template(
        name="veto_repeat",
        role="advisory",
        hook=HookName.PRE_ACTION,
        envs=frozenset(),
        params=(
            IntParam("max_in_a_row", 1, 4, 2, "identical actions allowed in a row"),
            IntParam("message", 0, len(REPEAT_MESSAGES) - 1, 0, "which veto message"),
        ),
        build=_veto_repeat,
        weights={"repeated": 2.0, "loops": 1.0, "always": 0.1},
        purpose="veto an action that is repeated in a row and ask the model for another",
        order=30,
        steer=lambda f: {"max_in_a_row": 1 if f["repeated"] >= 0.5 else 2},
    ),
    Template(
        name="recover_loop",
        role="advisory",
        hook=HookName.POST_FEEDBACK,
        envs=frozenset(),
        params=(
            IntParam("streak", 2, 5, 3, "streak length that triggers a restart"),
            IntParam("message", 0, len(RECOVER_MESSAGES) - 1, 0, "which recovery message"),
        ),
        build=_recover,
        weights={"loops": 2.0, "repeated": 1.0, "step_limit": 0.3},
        purpose="restart the context from the task after a streak without progress",
        order=20,
        steer=lambda f: {"streak": 2 if f["loops"] >= 0.5 else 3},
    ),
    Template(
        name="format_reminder",
        role="advisory",
        hook=HookName.PRE_DECISION,
        envs=frozenset(),
        params=(
            ChoiceParam("when", ("always", "after_invalid"), "after_invalid"),
            IntParam("show_actions", 0, 8, 0, "admissible actions shown as examples"),
        ),
        build=_format,
        weights={"invalid": 1.5, "prose_answer": 0.5, "always": 0.2},
        purpose="remind the model of the exact action format",
        order=20,
        steer=lambda f: {
            "when": "always" if f["invalid"] >= 0.6 else "after_invalid",
            "show_actions": 4 if f.env in ("alfworld", "webshop") else 0,
        },
    ),
    Template(
        name="progress_reminder",
        role="advisory",
        hook=HookName.PRE_DECISION,
        envs=frozenset(),
        params=(IntParam("warn_at", 1, 6, 2, "remaining steps that trigger the warning"),),
        build=_progress,
        weights={"step_limit": 1.0, "always": 0.1},
        purpose="warn the model when the step budget runs out so it finishes",
        order=30,
        steer=lambda f: {"warn_at": 3 if f["step_limit"] >= 0.5 else 2},
    ),
    Template(
        name="invalid_hint",
        role="advisory",
        hook=HookName.POST_FEEDBACK,
        envs=frozenset(),
        params=(IntParam("shown", 3, 12, 6, "valid actions listed"),),
        build=_invalid_hint,
        weights={"invalid": 1.2, "nothing": 1.0, "always": 0.1},
        # ALFWorld's prompter already lists the admissible commands with every observation
        gate=lambda f: 0.5 if f.env == "alfworld" else 1.0,
        purpose="list the valid actions right after an invalid one",
        order=40,
    ),
)
