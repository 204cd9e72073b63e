"""Patch: model-written hook code for one environment. Hostile until the sandbox says otherwise."""

from __future__ import annotations

import hashlib

from pydantic import Field, field_validator

from harness_r1.contracts.base import Contract, Message
from harness_r1.contracts.hooks import HookName


class HookCode(Contract):
    hook: HookName
    code: str = Field(description="Python source defining `def hook(ctx, state)` and helpers.")


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
        return next((h.code for h in self.hooks if h.hook == hook), None)
