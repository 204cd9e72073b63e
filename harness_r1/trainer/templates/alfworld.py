"""ALFWorld templates: skills per task type, exploration after "Nothing happens.", the take /
treat / place steps of the explorer plan, and a goal reminder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_r1.contracts import HookName
from harness_r1.trainer.templates.base import (
    ChoiceParam,
    Features,
    IntParam,
    RenderContext,
    Template,
    fill,
    lit,
)

ENVS = frozenset({"alfworld"})

#: Skills per ALFWorld task type: (short, step by step).
SKILLS: dict[str, tuple[str, str]] = {
    "pick_and_place_simple": (
        "Find the object, take it, then move it to the target receptacle.",
        "1) go to the places where the object may be (open closed ones); 2) take it; "
        "3) go to the target receptacle; 4) move the object to it.",
    ),
    "look_at_obj_in_light": (
        "Find the object and take it, then find a desklamp or floorlamp and use it.",
        "1) go to the places where the object may be; 2) take it; 3) go to the places where a "
        "desklamp or floorlamp may be; 4) use the lamp while holding the object.",
    ),
    "pick_clean_then_place_in_recep": (
        "Find the object, take it, clean it with the sinkbasin, then move it to the target.",
        "1) find and take the object; 2) go to the sinkbasin; 3) clean the object with the "
        "sinkbasin; 4) go to the target receptacle and move the object to it.",
    ),
    "pick_heat_then_place_in_recep": (
        "Find the object, take it, heat it with the microwave, then move it to the target.",
        "1) find and take the object; 2) go to the microwave; 3) heat the object with the "
        "microwave; 4) go to the target receptacle and move the object to it.",
    ),
    "pick_cool_then_place_in_recep": (
        "Find the object, take it, cool it with the fridge, then move it to the target.",
        "1) find and take the object; 2) go to the fridge; 3) cool the object with the fridge; "
        "4) go to the target receptacle and move the object to it.",
    ),
    "pick_two_obj_and_place": (
        "Find one object, take it, move it to the target; then find the second one and do the "
        "same.",
        "1) find and take the first object; 2) go to the target and move it there; 3) search "
        "other places for the second object; 4) take it and move it to the target too.",
    ),
}
GENERIC_SKILL = (
    "Work step by step: find the object, take it, treat it if the goal says so, then move it "
    "to the target receptacle."
)
NOTHING_TIP = (
    'If the game answers "Nothing happens.", the command was not valid: copy a command from '
    "AVAILABLE ACTIONS instead."
)
#: Receptacles in the order objects are most often found in them (the explorer's order).
LIKELY_ORDER = [
    "countertop",
    "diningtable",
    "sidetable",
    "desk",
    "coffeetable",
    "dresser",
    "shelf",
    "sofa",
    "armchair",
    "bed",
    "cart",
    "toilet",
    "sinkbasin",
    "stoveburner",
    "garbagecan",
    "microwave",
    "fridge",
    "cabinet",
    "drawer",
    "safe",
]

#: Goal parsing shared by the templates that need the object and the target (inline: composable
#: templates have no helpers).
GOAL_LINES = """
    goal = ctx["task"]["instruction"].lower()
    obj, target, treat = "", "", ""
    m = re.search(r"(?:look at|examine the) (\\w+) (?:under|with) the (\\w+)", goal)
    if m:
        obj, target, treat = m.group(1), m.group(2), "use"
    m = m or re.search(r"(clean|heat|cool) some (\\w+) and put it (?:in|on) (\\w+)", goal)
    if m and not obj:
        treat, obj, target = m.group(1), m.group(2), m.group(3)
    m = m or re.search(r"find two (\\w+) and put them (?:in|on) (\\w+)", goal)
    if m and not obj:
        obj, target = m.group(1), m.group(2)
    m = m or re.search(r"put (?:a|an|some|two) (clean |hot |cool )?(\\w+) (?:in|on) (\\w+)", goal)
    if m and not obj:
        treat = {"clean ": "clean", "hot ": "heat", "cool ": "cool"}.get(m.group(1) or "", "")
        obj, target = m.group(2), m.group(3)
    if not obj:
        return None
"""


def _skills(p: Mapping[str, Any], rc: RenderContext) -> str:
    index = 1 if p["detail"] == "steps" else 0
    types = [t for t in rc.task_types if t in SKILLS] or sorted(SKILLS)
    table = {t: SKILLS[t][index] for t in types}
    lines = [
        '    """Skills for the task type; the packet showed these types failing."""',
        f"    table = {lit(table)}",
        f'    skills = [table.get(ctx["task"]["task_type"], {lit(GENERIC_SKILL)})]',
    ]
    if p["nothing_tip"]:
        lines.append(f"    skills.append({lit(NOTHING_TIP)})")
    lines.append('    return {"skills": skills}')
    return "def @@fn@@(ctx, state):\n" + "\n".join(lines)


def _explore(p: Mapping[str, Any], rc: RenderContext) -> str:
    rank = (
        f"    order = {lit(LIKELY_ORDER)}\n"
        "    ranked = sorted([(order.index(a[6:].split(' ')[0]) if a[6:].split(' ')[0] in order "
        "else len(order), i, a) for i, a in enumerate(goes)])\n"
        "    step = ranked[0][2]\n"
        if p["order"] == "likely"
        else "    step = goes[0]\n"
    )
    code = '''
def @@fn@@(ctx, state):
    """After @@after_text@@ "Nothing happens." in a row, go to a place not visited yet."""
    if ctx["counters"]["nothing_happens_streak"] < @@after@@:
        return None
    actions = ctx["admissible_actions"] or []
    seen = state.get("explored", [])
    goes = [a for a in actions if a.startswith("go to ") and a not in seen]
    if not goes:
        state["explored"] = []
        return None
@@rank@@    state["explored"] = seen + [step]
    return {"effect": "force", "text": step}
'''
    return fill(code, after=lit(p["after"]), after_text=str(p["after"]), rank=rank)


def _open_block(pad: str) -> str:
    """Lines that open a receptacle the last observation says is closed."""
    return (
        f'{pad}closed = re.search(r"the (\\w+ \\d+) is closed", ctx["observation"].lower())\n'
        f'{pad}if closed and "open " + closed.group(1) in actions:\n'
        f'{pad}    return {{"effect": "force", "text": "open " + closed.group(1)}}\n'
    )


def _take_place(p: Mapping[str, Any], rc: RenderContext) -> str:
    code = (
        '''
def @@fn@@(ctx, state):
    """Explorer plan, take/treat/place part: act as soon as the next step is admissible."""'''
        + GOAL_LINES
        + """    actions = ctx["admissible_actions"] or []
    last, seen = ctx["last_action"] or "", ctx["observation"]
    if last.startswith("take ") and seen.startswith("You pick up"):
        state["held"], state["treated"] = last[5:].split(" from ")[0], False
    if last.startswith(("clean ", "heat ", "cool ")) and seen.startswith("You "):
        state["treated"] = True
    if last.startswith("move ") and seen.startswith("You move"):
        state["held"] = ""
    held = state.get("held", "")
    if not held:
        for a in actions:
            if a.startswith("take " + obj + " ") and (treat == "use" or " from " + target not in a):
                return {"effect": "force", "text": a}
@@open@@        return None
    if treat == "use":
        lamps = [a for a in actions if a.startswith("use " + target)]
        return {"effect": "force", "text": lamps[0]} if lamps else None
    if treat and not state.get("treated"):
        done = [a for a in actions if a.startswith(treat + " " + held + " with")]
        return {"effect": "force", "text": done[0]} if done else None
    moves = [a for a in actions if a.startswith("move " + held + " to " + target)]
    if moves:
        return {"effect": "force", "text": moves[0]}
@@open_held@@    return None
"""
    )
    wanted = bool(p["open_closed"])
    return fill(
        code,
        open=_open_block(" " * 8) if wanted else "",
        open_held=_open_block(" " * 4) if wanted else "",
    )


def _goal_reminder(p: Mapping[str, Any], rc: RenderContext) -> str:
    lines = [
        '    """Keep the goal in view and point at the object when it is visible."""',
        '    goal = ctx["task"]["instruction"]',
        '    note = "Goal: " + goal',
    ]
    if p["mention_visible"]:
        lines += [
            '    seen = ctx["observation"].lower()',
            '    words = [w for w in re.findall(r"[a-z]+", goal.lower()) if len(w) > 3]',
            '    here = [w for w in words if " " + w + " " in seen and w not in ["some", "them"]]',
            "    if here:",
            '        note += " You can see a " + here[0] + " here."',
        ]
    if p["show_held"]:
        lines += [
            '    if state.get("held"):',
            '        note += " You hold the " + state["held"] + "."',
        ]
    lines.append("    return note")
    return "def @@fn@@(ctx, state):\n" + "\n".join(lines)


def _explore_steer(f: Features) -> dict[str, Any]:
    return {"after": 1 if f["nothing"] >= 0.5 else 2, "order": "likely"}


TEMPLATES: tuple[Template, ...] = (
    Template(
        name="alfworld_skills",
        role="advisory",
        hook=HookName.EPISODE_START,
        envs=ENVS,
        params=(
            ChoiceParam("detail", ("short", "steps"), "steps", "one line or numbered steps"),
            ChoiceParam("nothing_tip", (True, False), True, 'explain "Nothing happens."'),
        ),
        build=_skills,
        weights={"always": 0.6, "step_limit": 0.5, "wrong_end": 0.3},
        purpose="give the model a plan for each failing task type",
        composable=False,
        steer=lambda f: {"nothing_tip": f["nothing"] > 0},
    ),
    Template(
        name="alfworld_explore_on_nothing",
        role="solver",
        hook=HookName.POST_FEEDBACK,
        envs=ENVS,
        params=(
            IntParam("after", 1, 3, 2, '"Nothing happens." in a row before exploring'),
            ChoiceParam("order", ("likely", "listed"), "likely", "which unvisited place first"),
        ),
        build=_explore,
        weights={"nothing": 2.2, "step_limit": 0.6, "always": 0.1},
        purpose='force a `go to` an unvisited place after "Nothing happens." answers',
        order=10,
        steer=_explore_steer,
        partners=("alfworld_take_place",),
    ),
    Template(
        name="alfworld_take_place",
        role="solver",
        hook=HookName.PRE_ACTION,
        envs=ENVS,
        params=(ChoiceParam("open_closed", (True, False), True, "open a closed receptacle"),),
        build=_take_place,
        weights={"step_limit": 1.0, "nothing": 0.8, "always": 0.3},
        purpose="take, treat and place the goal object as soon as those commands are admissible",
        order=10,
        partners=("alfworld_explore_on_nothing",),
    ),
    Template(
        name="alfworld_goal_reminder",
        role="advisory",
        hook=HookName.PRE_DECISION,
        envs=ENVS,
        params=(
            ChoiceParam("mention_visible", (True, False), True, "point at a visible goal word"),
            ChoiceParam("show_held", (True, False), True, "say what is held (if tracked)"),
        ),
        build=_goal_reminder,
        weights={"step_limit": 0.6, "repeated": 0.4, "always": 0.2},
        purpose="keep the goal in view at every decision",
        order=10,
    ),
)
