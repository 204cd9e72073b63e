"""Template calls: an engineer's patch written as the template choices it makes, not as code.

A call is engineer output whose `<patch>` block holds only the template teacher's description
line, e.g.

    <think>...</think><patch>
    # description: templates: ws_pick_options. ws_pick_options(buy=True, threshold=0.6).
    </patch>

and no hook section: the patch is the teacher's rendering of those choices (`choices_in` reads
them back, `TemplateTeacher.render_patch` composes them), checked like any other patch.

Why: a 135M engineer learns *which* template and parameters a packet needs (what the cold
start's rewards teach) long before it can copy a 25-line hook body token for token. It was
measured on WebShop's held-out packets: the SFT engineer named the winning template
(`ws_pick_options(buy=True, ...)`) in every proposal, then wrote bodies that forced invalid
actions (13 of 20 refused statically, the valid 7 at canary delta 0), where the teacher's
rendering of the same choice won +0.5 to +0.75. A call separates the decision, which is the
engineer's, from the transcription, which is ours. Free code stays the general form: any output
with a hook section is parsed as written.

Rendering has no packet here (the caller classifies text), so templates that adapt to a
packet's task types or option kinds render their general form (every skill of the env). A call
always adds its hooks: the teacher's re-tuning of a live template (`replace`, its rule 6) has
no call form and is written as code. The call is read where the parser reads a patch (the
first `<patch>` block after the think block, `sandbox.parse.patch_block`) and must be that
block's only line. `harness-r1 patch check` and patch files read code and JSON only: the
sandbox layer does not know the trainer's templates.
"""

from __future__ import annotations

import re

from harness_r1.contracts import Patch
from harness_r1.sandbox import (
    MAX_INPUT_CHARS,
    SECTION_LINE,
    RenderedCall,
    StaticLimits,
    parse_engineer_output,
    patch_block,
)
from harness_r1.trainer.teacher import LABEL, TeacherConfig, TemplateTeacher, choices_in
from harness_r1.trainer.templates import TEMPLATES

#: the one line of a call's patch block (the block read as the parser reads it: the first
#: `<patch>` after the think block); matched on that line alone, so no backtracking across text
_CALL_LINE = re.compile(r"#[ \t]*description:[ \t]*templates:[ \t]*(.*)", re.IGNORECASE)


def template_call(text: str, env: str, limits: StaticLimits | None = None) -> RenderedCall | None:
    """The patch a call renders, an error for a call that names a template wrongly, or None
    when `text` is no call (free code, JSON, no patch block, another description: parsed as
    usual). Strict: every name listed must be a template of the library for `env`, listed once,
    with exactly one label of its parameters, each value one the template takes; anything else
    is an error that says what, never a silent partial rendering."""
    if not isinstance(text, str) or len(text) > MAX_INPUT_CHARS:
        return None
    body = patch_block(text)
    if body is None or SECTION_LINE.search(body):
        return None
    lines = body.strip().splitlines()
    found = _CALL_LINE.fullmatch(lines[0]) if len(lines) == 1 else None
    if found is None:
        return None
    description = "templates: " + " ".join(found.group(1).split())
    refusal = _naming_error(description, env)
    if refusal is not None:
        return RenderedCall(error=f"template call: {refusal}")
    teacher = TemplateTeacher(TeacherConfig(limits=limits or StaticLimits()))
    try:
        choices = choices_in(description)
        return RenderedCall(patch=teacher.render_patch(env, choices, description=description))
    except (ValueError, KeyError) as err:
        return RenderedCall(error=f"template call: {err}")


def _naming_error(description: str, env: str) -> str | None:
    """What is wrong with the names of a call (None: each listed once, known, for `env`, with
    one label; the values are `choices_in`'s to check)."""
    head = description.removeprefix("templates: ").split(". ", 1)[0].rstrip(".")
    names = [n.strip() for n in head.split(",") if n.strip()]
    labelled = [name for name, _ in LABEL.findall(description)]
    unknown = [n for n in names if n not in TEMPLATES]
    if not names or unknown:
        return f"{', '.join(unknown or [head])[:80]!r} names no template of the library"
    foreign = [n for n in names if not TEMPLATES[n].applies_to(env)]
    if foreign:
        return f"{', '.join(foreign)} is not for env {env}"
    if len(set(names)) < len(names) or len(set(labelled)) < len(labelled):
        return "a template is listed or labelled twice"
    if sorted(labelled) != sorted(names):
        missing = sorted(set(names) - set(labelled)) or sorted(set(labelled) - set(names))
        return f"{', '.join(missing)}: listed without parameters, or labelled but not listed"
    return None


def as_call(completion: str, env: str) -> str | None:
    """A teacher's completion (think block, description, hook sections) as the call that
    renders the same choices: the think block and the description line, no code. None when the
    completion's patch is no teacher's (its description names no template)."""
    parsed = parse_engineer_output(completion, env=env)
    return None if parsed.patch is None else call_of(parsed.patch, parsed.think)


def call_of(patch: Patch, think: str = "") -> str | None:
    """`patch` written as a call (None when its description names no template): for a caller
    that holds the parsed patch already."""
    description = " ".join(patch.description.split())
    try:
        if not choices_in(description):
            return None
    except ValueError:
        return None
    return f"<think>{think.strip()}</think><patch>\n# description: {description}\n</patch>"
