"""How a chat model is told about a challenge game, and how its text becomes a command.

The format is the THOUGHT/ACTION one text-game agents commonly use (AgentBench's ALFWorld
prompt among them), with the admissible commands after each observation as "AVAILABLE
ACTIONS". A plugin writes its own prompter; nothing here is imported from harness-r1's
built-in envs, so this file is also an example of what one needs.

`extract_action` only parses (the text after the last "ACTION:"): snapping free text to the
closest admissible command is a harness patch's job, so a target's malformed commands stay
visible as invalid actions.
"""

from __future__ import annotations

import re
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs import INFO_ADMISSIBLE

INSTRUCTIONS = """\
You are playing a text adventure game. Each turn you read what you see and do one thing. \
The game tells you its objective at the start; reach it in as few turns as you can.
Your output must strictly follow this format: "THOUGHT: your thoughts.\\nACTION: your next \
action". Each observation ends with AVAILABLE ACTIONS, the commands that work right now: copy \
one of them exactly. Useful commands: look, inventory, go <direction>, open <thing>, \
take <thing>, take <thing> from <container>, unlock <door> with <key>, examine <thing>, \
put <thing> on <supporter>, eat <food>, cook <food> with <appliance>, prepare meal.

Here is one example.
Here is your task.
You are in a kitchen. There is an exit to the east.
Your objective is to find the coin.
AVAILABLE ACTIONS: go east, look, inventory
THOUGHT: The coin is not here; the only way on is east.
ACTION: go east"""

AVAILABLE_ACTIONS_LABEL = "AVAILABLE ACTIONS: "
_MARKER = re.compile(r"(?i)\baction\s*:")
_EDGE_JUNK = " \t\"'`*_.,;:!?()[]{}<>"


def extract_action(raw_output: str) -> str:
    """The first non-empty line after the last "ACTION:" (the whole output when there is
    none), edge punctuation stripped, whitespace collapsed, lower-cased. Never raises."""
    if not isinstance(raw_output, str):
        return ""
    markers = list(_MARKER.finditer(raw_output))
    rest = raw_output[markers[-1].end() :] if markers else raw_output
    line = next((ln for ln in rest.splitlines() if ln.strip(_EDGE_JUNK)), "")
    return " ".join(line.strip(_EDGE_JUNK).split()).lower()


class ChallengePrompter:
    """TaskPrompter for the challenge games (module docstring)."""

    def system_prompt(self, task: TaskSpec) -> str:
        del task  # one prompt for every challenge: the game states its own objective
        return INSTRUCTIONS

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return f"Here is your task. {task.instruction}\n{observation}{_available(info)}"

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation + _available(info)

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        del info  # parse only (module docstring)
        return extract_action(raw_output)


def _available(info: dict[str, Any] | None) -> str:
    actions = (info or {}).get(INFO_ADMISSIBLE)
    if not actions:
        return ""
    return "\n" + AVAILABLE_ACTIONS_LABEL + ", ".join(str(a) for a in actions)
