"""How a chat model is told about an ALFWorld task (AgentBench's prompt) and how its text
becomes an action.

The instructions follow AgentBench's ALFWorld prompt (THUDM/AgentBench, the multi-turn
THOUGHT/ACTION format with one worked example of the same task type, and the admissible
commands appended to each observation as "AVAILABLE ACTIONS"). One deliberate difference: the
action list names the commands of the alfworld 0.4.x games we play, read from the games' own
grammar and `help` text: `move {obj} to {recep}` (older ALFWorld and AgentBench say
`put {obj} in/on {recep}`, which these games answer with "Nothing happens.") and `use {obj}` for
switching a lamp on (there is no `toggle` command).

`extract_action` only parses: it does not snap free text to the closest admissible command.
Snapping (AgentBench does it with BLEU) is a harness patch's job, so a baseline target's
malformed actions stay visible as invalid actions.
"""

from __future__ import annotations

import re
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.alfworld.examples import EXAMPLES, render_example
from harness_r1.envs.base import INFO_ADMISSIBLE

INSTRUCTIONS = """\
Interact with a household to solve a task. Imagine you are an intelligent agent in a household \
environment and your target is to perform actions to complete the task goal. At the beginning \
of your interactions, you will be given the detailed description of the current environment \
and your goal to accomplish.
For each of your turn, you will be given the observation of the last turn. You should first \
think about the current condition and plan for your future actions, and then output your \
action in this turn. Your output must strictly follow this format: \
"THOUGHT: your thoughts.\\nACTION: your next action".

The available actions are:
1. go to {recep}
2. take {obj} from {recep}
3. move {obj} to {recep}
4. open {recep}
5. close {recep}
6. use {obj}
7. clean {obj} with {recep}
8. heat {obj} with {recep}
9. cool {obj} with {recep}
10. examine {obj} or examine {recep}
11. inventory
12. look
where {obj} and {recep} correspond to objects and receptacles, named exactly as the \
environment names them (for example "desk 1"). "move {obj} to {recep}" puts the object you \
hold in or on a receptacle; "use {obj}" turns on a lamp.
After your each turn, the environment will give you immediate feedback based on which you plan \
your next few steps. If the environment outputs "Nothing happens.", that means the previous \
action is invalid and you should try more options."""

ADMISSIBLE_REMINDER = """
Reminder:
1. Each observation ends with AVAILABLE ACTIONS, the actions that are valid right now. The \
action must be chosen from them; any other action will be regarded as illegal.
2. Think when necessary, try to act directly more in the process."""

RESPONSE_FORMAT = """

Your response should use the following format:

THOUGHT: <your thoughts>
ACTION: <your next action>"""

AVAILABLE_ACTIONS_LABEL = "AVAILABLE ACTIONS: "

#: "ACTION:" / "Action:" anywhere (a word boundary before it), or ">" opening a line.
_MARKER = re.compile(r"(?im)(?:\baction\s*:|^[ \t]*>)")
_EDGE_JUNK = " \t\"'`*_.,;:!?()[]{}<>"


def extract_action(raw_output: str) -> str:
    """The text after the last "ACTION:" / "Action:" / line-opening ">" marker (the whole output
    when there is none): its first non-empty line, quotes, markdown and punctuation stripped
    from both ends, whitespace collapsed, lower-cased. Never raises; junk stays junk."""
    if not isinstance(raw_output, str):
        return ""
    markers = list(_MARKER.finditer(raw_output))
    rest = raw_output[markers[-1].end() :] if markers else raw_output
    line = next((ln for ln in rest.splitlines() if ln.strip(_EDGE_JUNK)), "")
    return " ".join(line.strip(_EDGE_JUNK).split()).lower()


class AlfWorldPrompter:
    """TaskPrompter for ALFWorld (see the module docstring).

    `show_admissible`: append the currently admissible commands to each observation, as
    AgentBench does (default on). Off, the model must produce commands from the templates alone.
    """

    def __init__(self, *, show_admissible: bool = True) -> None:
        self.show_admissible = show_admissible

    def system_prompt(self, task: TaskSpec) -> str:
        parts = [INSTRUCTIONS]
        if self.show_admissible:
            parts.append(ADMISSIBLE_REMINDER)
        parts.append(RESPONSE_FORMAT)
        example = EXAMPLES.get(task.task_type) or EXAMPLES["pick_and_place_simple"]
        parts.append("\n\nHere is one example.\n")
        parts.append(render_example(example))
        return "".join(parts)

    def first_message(
        self, task: TaskSpec, observation: str, info: dict[str, Any] | None = None
    ) -> str:
        """The task and the opening observation; `info` (the reset info) adds the admissible
        commands when given."""
        del task  # the goal sentence is already the observation's last line
        return "Here is your task.\n" + observation + self._available(info)

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation + self._available(info)

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        del info  # no snapping to the admissible list here (see the module docstring)
        return extract_action(raw_output)

    def _available(self, info: dict[str, Any] | None) -> str:
        if not self.show_admissible or not info:
            return ""
        actions = info.get(INFO_ADMISSIBLE)
        if not actions:
            return ""
        return "\n" + AVAILABLE_ACTIONS_LABEL + ", ".join(str(a) for a in actions)
