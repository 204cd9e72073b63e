"""How the runtime calls hooks: a HookSet protocol with an in-process implementation.

The runtime never imports the sandbox. It is handed a HookSet: in-process callables here
(trusted code, tests, reference patches under development), the sandbox's isolated worker
in production and in the canary. Both return a HookCall: the value, the state after the call,
or the reason the call had no effect.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness_r1.contracts import HookFaultKind, HookName

HookFunction = Callable[[dict[str, Any], dict[str, Any]], Any]


@dataclass(frozen=True)
class HookCall:
    """Result of one hook call. `fault` set means: no effect, record it, go on."""

    value: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    # a HookFaultKind (the isolated executor's kinds; in-process: raised only)
    fault: str | None = None
    detail: str = ""
    seconds: float = 0.0


class HookSet(Protocol):
    """The hooks of one overlay. `call` never raises for anything the hook does."""

    overlay_id: str

    def has(self, hook: HookName) -> bool: ...

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall: ...


class NoHooks:
    """The base harness: no overlay in force."""

    overlay_id = "base"

    def has(self, hook: HookName) -> bool:
        return False

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall:
        return HookCall(state=state)


class InProcessHooks:
    """Trusted callables run in this process (no isolation: never for model-written code)."""

    def __init__(self, overlay_id: str, hooks: Mapping[HookName | str, HookFunction]) -> None:
        self.overlay_id = overlay_id
        self._hooks = {HookName(name): fn for name, fn in hooks.items()}

    def has(self, hook: HookName) -> bool:
        return hook in self._hooks

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall:
        # Copies: a hook may mutate its own state, never the runtime's ctx or a state it failed on.
        ctx_copy, state_copy = copy.deepcopy(ctx), copy.deepcopy(state)
        started = time.perf_counter()
        try:
            value = self._hooks[hook](ctx_copy, state_copy)
        except Exception as err:  # noqa: BLE001 - a hook's exception must never escape
            return HookCall(
                state=state,
                fault=HookFaultKind.RAISED,
                detail=f"{type(err).__name__}: {err}"[:500],
                seconds=time.perf_counter() - started,
            )
        return HookCall(value=value, state=state_copy, seconds=time.perf_counter() - started)
