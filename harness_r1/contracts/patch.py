"""Patch: model-written hook code for one environment. Hostile until the sandbox says otherwise.

A patch is one *link* of an overlay chain: its hooks are added to the incumbent overlay's
(`add`, the default), or stop the incumbent's hook of that name and run instead (`replace`), or
only stop it (`remove`, no code). `sandbox/compose.py` folds a chain of links into one composed
Patch with one plain hook per name, which is what the canary runs and releases carry.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from harness_r1.contracts.base import Contract, Message
from harness_r1.contracts.hooks import HookName


class HookMode(StrEnum):
    """How a link's hook relates to the incumbent's hook of the same name."""

    ADD = "add"
    REPLACE = "replace"
    REMOVE = "remove"


class HookCode(Contract):
    hook: HookName
    code: str = Field(
        default="", description="Python source defining `def hook(ctx, state)` and helpers."
    )
    mode: HookMode = Field(
        default=HookMode.ADD,
        description="add: run after the incumbent's hook; replace: run instead of it; "
        "remove: stop the incumbent's hook (no code).",
    )

    @model_validator(mode="after")
    def _code_matches_mode(self) -> HookCode:
        if self.mode == HookMode.REMOVE and self.code.strip():
            raise ValueError(f"{self.hook}: a 'remove' entry carries no code")
        return self

    @model_serializer(mode="wrap")
    def _omit_default_mode(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`add` is left out of the canonical JSON: patches written before modes existed keep
        their bytes, hence their sha256, their overlay ids and their signatures."""
        data: dict[str, Any] = handler(self)
        if self.mode == HookMode.ADD:
            data.pop("mode", None)
        return data


class Patch(Message):
    env: str
    description: str = ""
    hooks: list[HookCode] = Field(min_length=1)

    @field_validator("hooks")
    @classmethod
    def _one_per_hook(cls, hooks: list[HookCode]) -> list[HookCode]:
        names = [h.hook for h in hooks]
        duplicates = sorted({str(n) for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"each hook may appear once; repeated: {', '.join(duplicates)}")
        return hooks

    def sha256(self) -> str:
        """Content hash over the canonical JSON: the identity signatures and registries use."""
        return hashlib.sha256(self.to_json_bytes()).hexdigest()

    def code_for(self, hook: HookName) -> str | None:
        return next(
            (h.code for h in self.hooks if h.hook == hook and h.mode != HookMode.REMOVE), None
        )

    @property
    def runnable(self) -> bool:
        """Plain hooks only: what a worker may load. A link with `replace`/`remove` entries
        means something only against an incumbent and must be composed first."""
        return all(h.mode == HookMode.ADD for h in self.hooks)
