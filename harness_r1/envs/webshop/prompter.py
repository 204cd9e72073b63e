"""How a chat model is told about WebShop, and how its free text becomes an action.

Why this shape: AgentBench's WebShop prompt (instructions, `search[...]` / `click[...]`, a
Thought/Action answer format) with a short ReAct-style worked example, because small targets
mostly fail on format; the example is a made-up goal outside the 60 fixed goals so it does not
leak an answer. `extract_action` is lenient on form and strict on content: it takes the last
"Action:" line (or the line after it) or else the first bracketed action anywhere, lowercases
click targets, and returns junk unchanged for the env to reject.
"""

from __future__ import annotations

import re
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import INFO_ADMISSIBLE

SYSTEM_PROMPT = """You are web shopping.
I will give you instructions about what to do.
You have to follow the instructions.
Every round I will give you an observation and a list of available actions, you have to \
respond with an action based on the state and the instruction.
You can use the search action if search is available.
You can click one of the buttons in clickables.
An action should be of the following structure:
search[keywords]
click[value]
If the action is not valid, nothing happens.
Keywords in search are up to you, but the value in click must be a value in the list of \
available actions.
Remember that your keywords in search should be carefully designed.
Pick the options (color, size, ...) the instruction asks for on the item page before you \
click[buy now], and mind the price limit.
Your response should use the following format:

Thought:
I think ...

Action:
click[something]"""

WORKED_EXAMPLE = """Here is an example.

Observation:
WebShop [SEP] Instruction: [SEP] i want a 3 pack of lavender scented soy candles, and price \
lower than 30.00 dollars [SEP] Search

Thought:
I think I should search for lavender soy candles.

Action:
search[lavender scented soy candles 3 pack]

Observation:
Instruction: [SEP] i want a 3 pack of lavender scented soy candles, and price lower than \
30.00 dollars [SEP] Back to Search [SEP] Page 1 (Total results: 12) [SEP] Next > [SEP] \
B07EXAMPLE [SEP] Lavender Soy Candle Set, Scented Jar Candles [SEP] $21.99 [SEP] B08EXAMPLE \
[SEP] Vanilla Soy Candle [SEP] $14.50

Thought:
I think B07EXAMPLE is a lavender soy candle under 30 dollars. I should click it.

Action:
click[b07example]

Observation:
Instruction: [SEP] ... [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] 1 pack [SEP] \
3 pack [SEP] Lavender Soy Candle Set, Scented Jar Candles [SEP] Price: $21.99 [SEP] Rating: \
N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now

Thought:
I think I should choose the 3 pack option, then buy it.

Action:
click[3 pack]

Observation:
(the same item page)

Thought:
The 3 pack is selected and the price is fine.

Action:
click[buy now]"""

_ACTION_LINE_RE = re.compile(r"^\s*\**\s*action\s*\**\s*:\s*(.*)$", re.IGNORECASE)
_BRACKETED_RE = re.compile(r"\b(search|click)\s*\[([^\[\]\n]*)\]", re.IGNORECASE)


def _bracketed(text: str) -> str | None:
    match = _BRACKETED_RE.search(text)
    if match is None:
        return None
    kind = match.group(1).lower()
    arg = " ".join(match.group(2).split())
    return f"click[{arg.lower()}]" if kind == "click" else f"search[{arg}]"


def extract_action(raw_output: str) -> str:
    """Free model text -> `search[...]` / `click[...]`, or the stripped text when neither."""
    text = raw_output or ""
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        match = _ACTION_LINE_RE.match(lines[index])
        if match is None:
            continue
        rest = match.group(1).strip()
        if not rest:  # AgentBench puts the action on the line after "Action:"
            rest = next((ln.strip() for ln in lines[index + 1 :] if ln.strip()), "")
        found = _bracketed(rest)
        if found is not None:
            return found
        break
    found = _bracketed(text)
    return found if found is not None else text.strip()


class WebShopPrompter:
    """TaskPrompter for WebShop (AgentBench-style prompt, ReAct-style example)."""

    def system_prompt(self, task: TaskSpec) -> str:
        return f"{SYSTEM_PROMPT}\n\n{WORKED_EXAMPLE}"

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return (
            f"{self.feedback_message(observation, info)}\n\n"
            "Answer with Thought: and Action: as in the example."
        )

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        actions = info.get(INFO_ADMISSIBLE)
        listing = "\n".join(actions) if actions else "(none)"
        return f"Observation:\n{observation}\n\nAvailable Actions:\n{listing}"

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        try:
            return extract_action(raw_output)
        except Exception:  # never raise: junk maps to junk
            return (raw_output or "").strip()
