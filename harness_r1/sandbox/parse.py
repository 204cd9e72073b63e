"""Parse an engineer model's output into the Patch contract. Never raises, whatever the input.

Expected: `<think>...</think><patch>SECTIONS</patch>` where SECTIONS is the sectioned format of
`.patch` files (`render_sections`): an optional `# env: NAME` line, `# description: ...`, then
per hook a line `# === hook: NAME ===` (or `(replace)` / `(remove)`) and its code, as written:
no quoting, so no escape a small engineer can get wrong (measured: 36 of 57 invalid proposals
of the 135M engineer were invalid JSON, code inside a JSON string). The older
`<patch>{json}</patch>` is still read (larger teachers write JSON well; rows and overlays written
before keep parsing); a body that starts with `{` is JSON. Tolerated, because small models drift:
- no think block, or only a closing `</think>` (chat templates that open it in the prompt);
- leading whitespace and text before `<patch>`; trailing text after `</patch>`; a missing
  `</patch>` (truncated generation: the rest of the text is taken);
- JSON inside ``` or ```json fences within the patch tags, and text after the JSON object;
- no `<patch>` tag at all: the first JSON object of the output (after the think block; inside
  a ```json fence if there is one) is taken as a bare patch, and the result notes it;
- raw newlines and tabs inside JSON strings (code written as it reads instead of escaped as
  `\\n`: the commonest slip of a small engineer, and unambiguous to decode);
- in sections: free spacing and number of `=` in a section line, a hook's code inside a ```
  fence, code indented as a whole (dedented), no `<patch>` tag (the sections are taken).
The JSON is `{"env"?: str, "description": str, "hooks": [{"hook": name, "code": str}, ...]}`;
the mapping form `{"hooks": {"pre_action": "code", ...}}` is accepted too. The env comes from the
caller when the JSON has none; when both are given and differ, that is `env_mismatch`.

Error codes (stable): `too_large`, `no_patch_block`, `invalid_json`, `invalid_patch`,
`env_mismatch`.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from harness_r1.contracts import HookMode, Patch

#: Inputs above this many characters are refused before any parsing.
MAX_INPUT_CHARS = 200_000
MAX_ERRORS_SHOWN = 5


_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def dump_patch_json(body: dict[str, Any]) -> str:
    """The patch JSON as engineers were taught to write it before the sectioned format (and
    still the fallback of `render_completion`): `json.dumps` with the `\\n`
    escapes of strings written as raw newlines, so each hook's code reads as Python.

    Why: a 135M engineer garbled escaped code (7 of 8 samples invalid JSON, measured); raw
    newlines are what it saw in pretraining. `parse_engineer_output` reads this (its decoder is
    not strict) as well as standard JSON, which larger teachers write.
    """
    text = json.dumps(body, ensure_ascii=False)
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(0), text)


#: A hook section's first line: `# === hook: NAME ===`, or `# === hook: NAME (MODE) ===`. Spaces
#: and the number of `=` are free: a small engineer drifts on them, never on the meaning. Each
#: run of spaces has one place it can match (no backtracking blow-up on hostile input: tested
#: on a 200k-character line).
SECTION_LINE = re.compile(
    r"^[ \t]*#[ \t]*=+[ \t]*hook:[ \t]*(\w+)[ \t]*(?:\((\w+)\)[ \t]*)?(?:=+[ \t]*)?$",
    re.MULTILINE,
)
_MODES = frozenset(HookMode)
_DESCRIPTION = "# description:"
_CONTINUED = "#   "
_CODE_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n(.*?)\n?```[ \t]*\Z", re.DOTALL)


class SectionError(ValueError):
    """Sectioned text that is no patch (no section, an unknown mode, code under `remove`)."""


def sectioned(patch: Patch) -> bool:
    """Whether `render_sections` writes `patch` so that it reads back equal: code as the contract
    keeps it after `read_sections` (dedented, no blank lines around it, one final newline),
    no section line inside a hook's code, no `</patch>` anywhere (it would end the block)."""
    text = _sections_text(patch, with_env=True)
    if _PATCH_CLOSE.search(text):
        return False
    try:
        return Patch.model_validate(read_sections(text)) == patch
    except ValueError:  # SectionError, or a contract error: not this patch
        return False


def render_sections(patch: Patch, *, with_env: bool = True) -> str:
    """The sectioned text of `patch` (`.patch` files; the engineer's output without the env,
    which its caller knows). The description is one line. Raises ValueError when the patch
    would not read back equal (`sectioned`)."""
    if not sectioned(patch):
        raise ValueError(
            "the patch does not read back equal in sections (a section line or </patch> in it, "
            "or code not as the sections keep it)"
        )
    return _sections_text(patch, with_env=with_env)


def _sections_text(patch: Patch, *, with_env: bool) -> str:
    lines = [f"# env: {patch.env}"] if with_env else []
    description = " ".join(patch.description.split())
    if description:
        lines.append(f"{_DESCRIPTION} {description}")
    for hook in patch.hooks:
        mode = "" if hook.mode == HookMode.ADD else f" ({hook.mode})"
        lines.append(f"# === hook: {hook.hook}{mode} ===")
        if hook.code.strip():
            lines.append(hook.code.rstrip("\n"))
    return "\n".join(lines) + "\n"


def patch_json(patch: Patch) -> str:
    """The JSON form of a patch inside <patch> (the older output format, still read; used when
    a patch's code cannot be written in sections): description and hooks, env implied."""
    body = {
        "description": patch.description,
        "hooks": [h.model_dump(mode="json") for h in patch.hooks],
    }
    return dump_patch_json(body)


def render_completion(patch: Patch, think: str = "") -> str:
    """A patch in the exact output format (what a teacher writes and SFT trains on;
    `parse_engineer_output` reads it back): `<think>...</think><patch>` then the
    sections of `render_sections` without the env (the caller knows it), then
    `</patch>`. Code is written as it reads: nothing to escape. A patch whose code holds a
    section line or `</patch>` is written as JSON instead (`patch_json`)."""
    try:
        body = "\n" + render_sections(patch, with_env=False)
    except ValueError:  # it would not read back equal in sections
        body = patch_json(patch)
    return f"<think>{think.strip()}</think><patch>{body}</patch>"


def read_sections(text: str) -> dict[str, Any]:
    """The patch dict (`env` only when a `# env:` line gives it) of sectioned text. Raises
    SectionError. Hook names are left to the contract to check (its message lists them)."""
    header, *parts = SECTION_LINE.split(text)
    if not parts:
        raise SectionError("no '# === hook: NAME ===' section")
    data: dict[str, Any] = {"description": _header_description(header)}
    env = re.search(r"^[ \t]*#[ \t]*env:[ \t]*(\S+)", header, re.MULTILINE)
    if env is not None:
        data["env"] = env.group(1)
    hooks = []
    for name, written_mode, code in zip(parts[::3], parts[1::3], parts[2::3], strict=True):
        mode = None if written_mode is None else written_mode.lower()
        if mode is not None and mode not in _MODES:
            raise SectionError(f"hook {name}: unknown mode {mode!r} (add, replace or remove)")
        body = _section_code(code)
        if mode == HookMode.REMOVE and body:
            raise SectionError(f"hook {name}: a '(remove)' section carries no code")
        hooks.append({"hook": name, "code": body, "mode": mode or str(HookMode.ADD)})
    data["hooks"] = hooks
    return data


def _header_description(header: str) -> str:
    """The `# description:` line with its `#   ` continuation lines, joined by spaces."""
    lines: list[str] = []
    collecting = False
    for line in header.splitlines():
        if line.lstrip().startswith(_DESCRIPTION):
            collecting = True
            lines.append(line.lstrip().removeprefix(_DESCRIPTION).strip())
        elif collecting and line.startswith(_CONTINUED):
            lines.append(line.removeprefix("#").strip())
        else:
            collecting = False
    return " ".join(lines)


def _section_code(code: str) -> str:
    """A section's code as the contract keeps it: unfenced, dedented, no blank lines around it,
    one final newline ("" for none)."""
    stripped = code.strip("\n")
    fenced = _CODE_FENCE.match(stripped.strip())
    if fenced is not None:
        stripped = fenced.group(1)
    body = textwrap.dedent(stripped).strip()
    return body + "\n" if body else ""


class ParseCode(StrEnum):
    TOO_LARGE = "too_large"
    NO_PATCH_BLOCK = "no_patch_block"
    INVALID_JSON = "invalid_json"
    INVALID_PATCH = "invalid_patch"
    ENV_MISMATCH = "env_mismatch"


@dataclass(frozen=True)
class ParseResult:
    """A Patch, or the stable code and human message of why there is none."""

    patch: Patch | None = None
    think: str = ""
    code: ParseCode | None = None
    message: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.patch is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "code": None if self.code is None else str(self.code),
            "message": self.message,
            "think_chars": len(self.think),
            "notes": list(self.notes),
        }


_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_PATCH_OPEN = re.compile(r"<patch\s*>", re.IGNORECASE)
_PATCH_CLOSE = re.compile(r"</patch\s*>", re.IGNORECASE)
#: strict=False: control characters (a raw newline in the code string) are taken as written
_DECODER = json.JSONDecoder(strict=False)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


def patch_block(text: str) -> str | None:
    """The body of the first `<patch>` block after the think block, as `parse_engineer_output`
    reads it (to the end of the text when `</patch>` is missing); None without a `<patch>` tag.
    For readers of another patch form (`trainer.template_calls`) that must agree with the
    parser on where the patch is."""
    _, rest, _ = _split_think(text)
    opened = _PATCH_OPEN.search(rest)
    if opened is None:
        return None
    closed = _PATCH_CLOSE.search(rest, opened.end())
    return rest[opened.end() :] if closed is None else rest[opened.end() : closed.start()]


def _split_think(text: str) -> tuple[str, str, list[str]]:
    """(think text, the rest, notes)."""
    notes: list[str] = []
    close = text.find(_THINK_CLOSE)
    if close < 0:
        notes.append("no think block")
        return "", text, notes
    open_at = text.find(_THINK_OPEN)
    if 0 <= open_at < close:
        think = text[open_at + len(_THINK_OPEN) : close]
    else:
        think = text[:close]
        notes.append("think block without <think> opening tag")
    return think.strip(), text[close + len(_THINK_CLOSE) :], notes


def _unfence(body: str) -> tuple[str, bool]:
    stripped = body.strip()
    if stripped.startswith("{") or "```" not in stripped:
        return stripped, False
    match = _FENCE.search(stripped)
    if match is None:
        return stripped, False
    return match.group(1).strip(), True


def _decode_object(body: str) -> tuple[Any, str | None, bool]:
    """(value, error message, trailing text present) for the first JSON object in body."""
    start = 0 if body.startswith("[") else body.find("{")
    if start < 0:
        return None, "no hook section ('# === hook: NAME ===') and no JSON object ('{')", False
    try:
        value, end = _DECODER.raw_decode(body, start)
    except json.JSONDecodeError as err:
        return None, f"{err.msg} at line {err.lineno} column {err.colno}", False
    except (RecursionError, ValueError, MemoryError) as err:
        return None, f"{type(err).__name__}: {str(err)[:200]}", False
    return value, None, bool(body[end:].strip())


def _normalise(value: Any, env: str | None) -> tuple[dict[str, Any] | None, str | None, bool]:
    """(patch dict, error message, env mismatch) from the decoded JSON."""
    if not isinstance(value, dict):
        return None, f"the patch must be a JSON object, got {type(value).__name__}", False
    data = dict(value)
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        data["hooks"] = [{"hook": name, "code": code} for name, code in hooks.items()]
    given = data.get("env")
    if given is None or given == "":
        if env is None:
            return None, "env: missing (the JSON has no env and none was given)", False
        data["env"] = env
    elif env is not None and given != env:
        return None, f"the patch is for env {given!r}, expected {env!r}", True
    return data, None, False


def _summarise(err: ValidationError) -> str:
    parts = []
    errors = err.errors(include_url=False)
    for item in errors[:MAX_ERRORS_SHOWN]:
        loc = ".".join(str(p) for p in item.get("loc", ())) or "patch"
        parts.append(f"{loc}: {item.get('msg', 'invalid')}")
    more = len(errors) - MAX_ERRORS_SHOWN
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def parse_engineer_output(
    text: Any, env: str | None = None, *, max_chars: int = MAX_INPUT_CHARS
) -> ParseResult:
    """Parse engineer output (or a bare patch JSON) into a Patch. Never raises."""
    try:
        return _parse(text, env, max_chars)
    except Exception as err:  # noqa: BLE001 - the contract is: never raise
        return ParseResult(
            code=ParseCode.INVALID_PATCH,
            message=f"could not parse the output ({type(err).__name__})",
        )


def _parse(text: Any, env: str | None, max_chars: int) -> ParseResult:
    if isinstance(text, bytes | bytearray):
        if len(text) > max_chars * 4:
            return ParseResult(
                code=ParseCode.TOO_LARGE, message=f"input is over {max_chars} characters"
            )
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return ParseResult(
            code=ParseCode.NO_PATCH_BLOCK, message=f"input is {type(text).__name__}, not text"
        )
    if len(text) > max_chars:
        return ParseResult(
            code=ParseCode.TOO_LARGE,
            message=f"input is {len(text)} characters; the limit is {max_chars}",
        )
    think, rest, notes = _split_think(text)
    opened = _PATCH_OPEN.search(rest)
    if opened is not None:
        closed = _PATCH_CLOSE.search(rest, opened.end())
        if closed is None:
            body = rest[opened.end() :]
            notes.append("no </patch> closing tag")
        else:
            body = rest[opened.end() : closed.start()]
            if rest[closed.end() :].strip():
                notes.append("text after </patch> ignored")
    else:
        body = rest
    if _is_sectioned(body):
        if opened is None:
            notes.append("bare sections (no <patch> tag)")
        return _from_sections(body, env, think, notes)
    return _from_json(body, opened is not None, env, think, notes)


def _is_sectioned(body: str) -> bool:
    """Sections, not JSON: a section line comes before any `{` (JSON whose code holds a line
    like a section's, fenced or after prose, stays JSON)."""
    section = SECTION_LINE.search(body)
    if section is None:
        return False
    brace = body.find("{")
    return brace < 0 or section.start() < brace


def _from_sections(body: str, env: str | None, think: str, notes: list[str]) -> ParseResult:
    try:
        value = read_sections(body)
    except SectionError as err:
        return ParseResult(
            think=think, code=ParseCode.INVALID_PATCH, message=str(err), notes=tuple(notes)
        )
    return _validated(value, env, think, notes)


def _from_json(
    body: str, tagged: bool, env: str | None, think: str, notes: list[str]
) -> ParseResult:
    body, fenced = _unfence(body)
    if tagged and fenced:
        notes.append("fenced JSON")
    if not tagged:
        if "{" not in body:
            return ParseResult(
                think=think,
                code=ParseCode.NO_PATCH_BLOCK,
                message="no <patch>...</patch> block, no hook section and no JSON object in "
                "the output",
                notes=tuple(notes),
            )
        notes.append("bare JSON (no <patch> tag)")
    value, error, trailing = _decode_object(body)
    if error is not None:
        return ParseResult(
            think=think,
            code=ParseCode.INVALID_JSON,
            message=f"the patch is not valid JSON: {error}",
            notes=tuple(notes),
        )
    if trailing:
        notes.append("text after the JSON object ignored")
    return _validated(value, env, think, notes)


def _validated(value: Any, env: str | None, think: str, notes: list[str]) -> ParseResult:
    data, problem, mismatch = _normalise(value, env)
    if data is None:
        return ParseResult(
            think=think,
            code=ParseCode.ENV_MISMATCH if mismatch else ParseCode.INVALID_PATCH,
            message=problem or "invalid patch",
            notes=tuple(notes),
        )
    try:
        patch = Patch.model_validate(data)
    except ValidationError as err:
        return ParseResult(
            think=think,
            code=ParseCode.INVALID_PATCH,
            message=f"the patch does not match the contract: {_summarise(err)}",
            notes=tuple(notes),
        )
    except ValueError as err:  # e.g. an unsupported schema_version raised by a validator
        return ParseResult(
            think=think,
            code=ParseCode.INVALID_PATCH,
            message=f"the patch does not match the contract: {str(err)[:300]}",
            notes=tuple(notes),
        )
    return ParseResult(patch=patch, think=think, notes=tuple(notes))
