"""Parse an engineer model's output into the Patch contract. Never raises, whatever the input.

Expected: `<think>...</think><patch>{json}</patch>`. Tolerated, because small models drift:
- no think block, or only a closing `</think>` (chat templates that open it in the prompt);
- leading whitespace and text before `<patch>`; trailing text after `</patch>`; a missing
  `</patch>` (truncated generation: the rest of the text is taken);
- JSON inside ``` or ```json fences within the patch tags, and text after the JSON object;
- no `<patch>` tag at all: the first JSON object of the output (after the think block; inside
  a ```json fence if there is one) is taken as a bare patch, and the result notes it;
- raw newlines and tabs inside JSON strings (code written as it reads instead of escaped as
  `\\n`: the commonest slip of a small engineer, and unambiguous to decode).
The JSON is `{"env"?: str, "description": str, "hooks": [{"hook": name, "code": str}, ...]}`;
the mapping form `{"hooks": {"pre_action": "code", ...}}` is accepted too. The env comes from the
caller when the JSON has none; when both are given and differ, that is `env_mismatch`.

Error codes (stable): `too_large`, `no_patch_block`, `invalid_json`, `invalid_patch`,
`env_mismatch`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from harness_r1.contracts import Patch

#: Inputs above this many characters are refused before any parsing.
MAX_INPUT_CHARS = 200_000
MAX_ERRORS_SHOWN = 5


_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def dump_patch_json(body: dict[str, Any]) -> str:
    """The patch JSON as engineers are taught to write it: `json.dumps` with the `\\n` escapes
    of strings written as raw newlines, so each hook's code reads as Python, line by line.

    Why: a 135M engineer garbled escaped code (session 4: 7 of 8 samples invalid JSON); raw
    newlines are what it saw in pretraining. `parse_engineer_output` reads this (its decoder is
    not strict) as well as standard JSON, which larger teachers write.
    """
    text = json.dumps(body, ensure_ascii=False)
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(0), text)


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
        return None, "no JSON object found (expected '{')", False
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
        body, fenced = _unfence(body)
        if fenced:
            notes.append("fenced JSON")
    else:
        body, fenced = _unfence(rest)
        if "{" not in body:
            return ParseResult(
                think=think,
                code=ParseCode.NO_PATCH_BLOCK,
                message="no <patch>...</patch> block and no JSON object in the output",
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
