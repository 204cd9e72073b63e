"""Who decided each action: the model, or a hook in its place.

Why: a harness improves an agent by guiding, checking, repairing and recovering what the model
proposes; a hook that picks the action itself plays the task in the model's place. An operator
must be able to see (and limit) how much of an agent a patch takes over, so every step records
its action's origin and every success figure is reported with the shares computed here, the
one place they are computed.

Origins:
- `model`: the model's proposal went to the env unchanged (a hook may have added notes);
- `rewritten`: a pre_action hook replaced the model's proposal with other text;
- `forced`: a hook chose the action without the model or regardless of it (pre_action `force`,
  or the previous step's post_feedback `force`: no model call at all);
- `vetoed_then_model`: a pre_action hook vetoed, the model proposed again, and its own last
  proposal went through (allowed, or past the veto limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import Field

from harness_r1.contracts.base import Contract


class ActionOrigin(StrEnum):
    MODEL = "model"
    REWRITTEN = "rewritten"
    FORCED = "forced"
    VETOED_THEN_MODEL = "vetoed_then_model"


class OriginCounts(Contract):
    """Steps of one episode (or of many, summed) by the origin of their action."""

    model: int = Field(default=0, ge=0)
    rewritten: int = Field(default=0, ge=0)
    forced: int = Field(default=0, ge=0)
    vetoed_then_model: int = Field(default=0, ge=0)

    @property
    def steps(self) -> int:
        return self.model + self.rewritten + self.forced + self.vetoed_then_model

    @property
    def model_share(self) -> float:
        """Share of steps whose action is the model's own proposal (0.0 with no steps)."""
        return (self.model + self.vetoed_then_model) / self.steps if self.steps else 0.0

    @property
    def forced_share(self) -> float:
        """Share of steps whose action a hook chose without or regardless of the model."""
        return self.forced / self.steps if self.steps else 0.0

    @property
    def measured_forced_share(self) -> float | None:
        """The forced share as tables and metrics report it: None where there were no steps
        (nothing measured is not a share of 0)."""
        return self.forced_share if self.steps else None

    def __add__(self, other: OriginCounts) -> OriginCounts:
        return OriginCounts(
            model=self.model + other.model,
            rewritten=self.rewritten + other.rewritten,
            forced=self.forced + other.forced,
            vetoed_then_model=self.vetoed_then_model + other.vetoed_then_model,
        )

    @classmethod
    def of(cls, origins: Iterable[ActionOrigin | str]) -> OriginCounts:
        counts = dict.fromkeys(ActionOrigin, 0)
        for origin in origins:
            counts[ActionOrigin(origin)] += 1
        return cls(**{str(k): v for k, v in counts.items()})

    @classmethod
    def total(cls, counts: Iterable[OriginCounts]) -> OriginCounts:
        out = cls()
        for one in counts:
            out = out + one
        return out


def format_share(share: float | None) -> str:
    """A share as a table shows it: `0.35`, or `-` where there were no steps."""
    return "-" if share is None else f"{share:.2f}"


def infer_origin(effects: Sequence[Mapping[str, Any]], model_calls: int) -> ActionOrigin:
    """The origin of a step recorded before steps carried one (trajectory schema 1.0), read
    from what the step recorded: no model call means the previous step's post_feedback forced
    it; otherwise the last pre_action effect decides (force, rewrite, or vetoes after which
    the model's proposal went through). The runtime records the origin directly; this is the
    same rule, for old records."""
    if model_calls == 0:
        return ActionOrigin.FORCED
    kinds = [str(e.get("kind")) for e in effects if str(e.get("hook")) == "pre_action"]
    if not kinds:
        return ActionOrigin.MODEL
    last = kinds[-1]
    if last == "force":
        return ActionOrigin.FORCED
    if last == "rewrite":
        return ActionOrigin.REWRITTEN
    return ActionOrigin.VETOED_THEN_MODEL if "veto" in kinds else ActionOrigin.MODEL
