"""Settings that cannot be used: the error, and one line per bad field naming the value, what
is wrong and the two places to fix it (the environment variable, the YAML key)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, get_args

from pydantic import (
    BaseModel,
    SecretStr,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

ENV_PREFIX = "HARNESS_R1_"
MASK = "**********"


class SettingsError(SystemExit):
    """Settings that cannot be used. A SystemExit so an entry point that does not catch it
    still stops with the message (and no traceback); `problems` holds one line per bad field."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.problems = list(problems)

    def __str__(self) -> str:
        return self.message


# Bounds on a value that parsed as a number: shown unquoted even when it came as a string.
_NUMERIC = ("greater_than_equal", "greater_than", "less_than_equal", "less_than")
_PHRASES = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
    "literal_error": "must be one of {expected}",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "model_type": "must be a mapping of settings (a YAML section)",
    "model_attributes_type": "must be a mapping of settings (a YAML section)",
    "missing": "is required",
}


def describe_error(error: ErrorDetails, root: type[BaseModel]) -> str:
    """`loop.batch_size: must be >= 1 (got 0); set HARNESS_R1_LOOP__BATCH_SIZE or
    loop.batch_size in the YAML`: the field, what is wrong, and the two places to fix it
    (`root`: the settings model the error came from)."""
    parts = [str(part) for part in error["loc"]]
    dotted = ".".join(parts)
    env = ENV_PREFIX + "__".join(parts).upper()
    kind = error["type"]
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        known = ", ".join(_known_keys(root, parts[:-1])) or "none"
        return (
            f"{dotted}: unknown setting; remove {env} or {dotted} from the YAML, or fix the "
            f"spelling (known here: {known})"
        )
    if kind in ("value_error", "assertion_error"):
        message = str(error.get("ctx", {}).get("error", error["msg"]))
    elif kind == "string_too_short" and error.get("ctx", {}).get("min_length") == 1:
        message = f"must not be empty (got {_shown(root, parts, error['input'])})"
    else:
        phrase = _PHRASES.get(kind)
        message = (
            phrase.format(**error.get("ctx", {}))
            if phrase is not None
            else error["msg"][:1].lower() + error["msg"][1:]
        )
        if kind != "missing":
            message += f" (got {_shown(root, parts, error['input'], quote=kind not in _NUMERIC)})"
    if _group_of(root, parts) is not None:
        hint = f"fix {env}__* or the {dotted} section of the YAML"
    else:
        hint = f"set {env} or {dotted} in the YAML"
    return f"{dotted}: {message}; {hint}" if parts else f"{message}; {hint}"


def group_fields(annotation: Any) -> dict[str, FieldInfo] | None:
    """The settings of a group: a pydantic model's fields, or a domain config's that is a
    pydantic dataclass (`deploy.GuardConfig`), excluded fields left out; None for a value that
    is no group."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return dict(annotation.model_fields)
    fields = getattr(annotation, "__pydantic_fields__", None)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation) and fields:
        return {name: info for name, info in fields.items() if not info.exclude}
    return None


def _fields_at(root: type[BaseModel], parts: Sequence[str]) -> dict[str, FieldInfo] | None:
    fields: dict[str, FieldInfo] | None = dict(root.model_fields)
    for part in parts:
        field = fields.get(part) if fields is not None else None
        fields = group_fields(field.annotation) if field is not None else None
        if fields is None:
            return None
    return fields


def _group_of(root: type[BaseModel], parts: Sequence[str]) -> dict[str, FieldInfo] | None:
    return _fields_at(root, parts) if parts else None


def _known_keys(root: type[BaseModel], parts: Sequence[str]) -> list[str]:
    fields = _fields_at(root, parts)
    return sorted(fields) if fields is not None else []


def _is_secret(root: type[BaseModel], parts: Sequence[str]) -> bool:
    fields = _fields_at(root, parts[:-1])
    field = fields.get(parts[-1]) if fields is not None and parts else None
    if field is None:
        return False
    return field.annotation is SecretStr or SecretStr in get_args(field.annotation)


def _shown(root: type[BaseModel], parts: Sequence[str], value: Any, quote: bool = True) -> str:
    """The offending value as it would be written, masked for secrets, cut when long; a number
    read from an environment variable arrives as a string and is shown as the number."""
    if _is_secret(root, parts):
        return MASK
    text = repr(value) if quote and isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."
