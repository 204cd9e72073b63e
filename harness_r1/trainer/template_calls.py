"""Template calls: an engineer's patch written as the template choices it makes, not as code.

A call is engineer output whose `<patch>` block holds only the template teacher's description
line, e.g.

    <think>...</think><patch>
    # description: templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.6).
    </patch>

and no hook section: the patch is the teacher's rendering of those choices (`choices_in` reads
them back, `TemplateTeacher.render_patch` composes them), checked like any other patch.

Why: a 135M engineer learns *which* template and parameters a packet needs (what the cold
start's rewards teach) long before it can copy a 25-line hook body token for token. Session 14
measured it on WebShop's held-out packets: the SFT engineer named the winning template
(`ws_pick_options(buy=True, ...)`) in every proposal, then wrote a body that forced an invalid
action (4 of 8 refused statically, the valid 4 at canary delta 0), where the teacher's
rendering of the same choice won +0.5. A call separates the decision, which is the engineer's,
from the transcription, which is ours. Free code stays the general form: any output with a hook
section is parsed as written.

Rendering has no packet here (the caller classifies text), so templates that adapt to a
packet's task types or option kinds render their general form (every skill of the env).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness_r1.contracts import Patch
from harness_r1.sandbox.parse import MAX_INPUT_CHARS, SECTION_LINE, parse_engineer_output
from harness_r1.sandbox.static import StaticLimits
from harness_r1.trainer.teacher import TeacherConfig, TemplateTeacher, choices_in

#: the patch block of a call: the description line alone (its `</patch>` may be cut off by the
#: token limit); text before `<patch>` (the think block) is the caller's. Greedy to the line's
#: end, so hostile input cannot make it backtrack quadratically (tested on 200k characters)
_CALL = re.compile(
    r"<patch\s*>\s*#[ \t]*description:[ \t]*(templates:[^\n]*)(?:\n\s*)?(?:</patch\s*>|\Z)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CallResult:
    """`patch` for a call that renders; `error` for one that names templates wrongly (an
    unknown value, a template without its parameters, a combination that cannot compose)."""

    patch: Patch | None = None
    error: str | None = None


def template_call(text: str, env: str, limits: StaticLimits | None = None) -> CallResult | None:
    """The patch a call renders, an error for a call-shaped text that names no template of the
    library or names one wrongly, or None when `text` is no call (free code, JSON, no patch
    block, another description: parsed as usual)."""
    if not isinstance(text, str) or len(text) > MAX_INPUT_CHARS or SECTION_LINE.search(text):
        return None
    found = _CALL.search(text)
    if found is None:
        return None
    description = " ".join(found.group(1).split())
    try:
        choices = choices_in(description)
    except ValueError as err:
        return CallResult(error=f"template call: {err}")
    if not choices:  # call-shaped, but no template of the library named: say so
        named = description.removeprefix("templates:").split(".", 1)[0].strip()
        return CallResult(error=f"template call: {named[:80]!r} names no template of the library")
    foreign = [c.name for c in choices if not c.template.applies_to(env)]
    if foreign:
        return CallResult(error=f"template call: {', '.join(foreign)} is not for env {env}")
    teacher = TemplateTeacher(TeacherConfig(limits=limits or StaticLimits()))
    try:
        return CallResult(patch=teacher.render_patch(env, choices, description=description))
    except ValueError as err:
        return CallResult(error=f"template call: {err}")


def as_call(completion: str, env: str) -> str | None:
    """A teacher's completion (think block, description, hook sections) as the call that
    renders the same choices: the think block and the description line, no code. None when the
    completion's patch is no teacher's (its description names no template)."""
    parsed = parse_engineer_output(completion, env=env)
    if parsed.patch is None:
        return None
    description = " ".join(parsed.patch.description.split())
    try:
        if not choices_in(description):
            return None
    except ValueError:
        return None
    return f"<think>{parsed.think.strip()}</think><patch>\n# description: {description}\n</patch>"
