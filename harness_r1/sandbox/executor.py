"""IsolatedHooks: the HookSet that runs a patch's hooks in a warm, isolated worker process.

The runtime (or the canary) holds one IsolatedHooks per overlay. Each call is one JSON line to
the worker and one back, under a wall-clock deadline polled on the pipe; the call never raises
and never blocks past its budget. Whatever goes wrong (timeout, crash, EOF, malformed or
oversized response) kills the worker's whole process group, is counted in `events`, and the call
has no effect: the state handed in comes back unchanged. A fresh worker is started lazily on
the next call (with the hooks loaded again).

Static checks first: the constructor runs the static checks on the patch and, if they reject
it, never starts a worker (every call: fault `invalid`). Only `from_sources` (tests and
diagnostics of the worker itself) skips them, explicitly.

Fail closed: the worker reports which isolation layers it applied (see `isolation`). If any
required layer is missing and `SandboxConfig.allow_unisolated` is False, the worker is killed,
`isolated` is False, a loud log line says why, and every call returns `unisolated_refused`.

The worker process itself (its start, its pipe, its end) is `worker_process.py`'s, the base
class of IsolatedHooks; its settings are `SandboxConfig` (`sandbox_config.py`).

Why a module of its own: this is what a hook call means to the runtime and the canary (the
HookSet protocol, the static rejection, fault accounting, recycling a worker after a call, the
per-overlay budget), apart from how the bytes reach the worker and back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import structlog

from harness_r1.contracts import HookCode, HookFaultKind, HookName, Patch
from harness_r1.harness import HookCall
from harness_r1.sandbox.isolation import IsolationReport
from harness_r1.sandbox.metrics import SandboxMetrics
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.worker_faults import FAULT_COUNTERS, FAULTS, _Fault
from harness_r1.sandbox.worker_process import _Worker, _WorkerProcess

log = structlog.get_logger(__name__)

# the faults a call of the patch itself causes that end the worker (a restart for the next
# call), by the words of the reason; crashes are not among them: a worker killed from outside
# (the OOM killer, an operator) or one that cannot start says nothing about the patch
_KILLING = {"timeout": "timeouts", "memory fault": "memory"}


def _new_events() -> dict[str, int]:
    names = ["calls", "ok", "starts", "restarts", "start_failures", "recycles", "load_errors"]
    # "disabled" appears once the per-overlay budget is spent (most hook sets never see it)
    counters = [c for c in FAULT_COUNTERS.values() if c != "disabled"]
    return dict.fromkeys([*names, "unisolated_workers", *counters], 0)


class IsolatedHooks(_WorkerProcess):
    """HookSet over an isolated warm worker. Thread-safe (one lock); `call` never raises."""

    def __init__(
        self,
        patch: Patch,
        config: SandboxConfig | None = None,
        *,
        overlay_id: str | None = None,
        start: bool = True,
        static_checks: bool = True,
        metrics: SandboxMetrics | None = None,
    ) -> None:
        self.overlay_id = overlay_id or f"patch-{patch.sha256()[:16]}"
        self.metrics = metrics
        self.static_rejection: str | None = None
        if not patch.runnable:  # replace/remove mean something only composed (sandbox.compose)
            self.static_rejection = (
                "not_composed: a patch with 'replace' or 'remove' entries runs only composed "
                "onto an incumbent"
            )
            start = False
        elif static_checks:
            from harness_r1.sandbox.intake import check

            self.static_rejection = check(patch)
            if self.static_rejection is not None:
                start = False
        self.config = config or SandboxConfig()
        self._sources = {str(h.hook): h.code for h in patch.hooks}
        self._hooks = {HookName(h.hook) for h in patch.hooks}
        self.events: dict[str, int] = _new_events()
        self.load_errors: dict[str, str] = {}
        self.report: IsolationReport | None = None
        self.last_start_s: float | None = None
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._refused: str | None = None
        self.disabled_reason: str | None = None  # set once the per-overlay budget is spent
        self._closed = False
        self._retry_at = 0.0
        self._backoff = 0.0
        if start:
            with self._lock, contextlib.suppress(_Fault):
                self._ensure_worker()

    @classmethod
    def from_sources(
        cls,
        hooks: Mapping[HookName | str, str],
        config: SandboxConfig | None = None,
        *,
        env: str = "any",
        overlay_id: str | None = None,
        start: bool = True,
        static_checks: bool = False,
    ) -> IsolatedHooks:
        """Raw hook sources, by default WITHOUT the static checks: for tests and diagnostics of
        the worker's own containment. Production code builds IsolatedHooks from a Patch."""
        codes = [HookCode(hook=HookName(name), code=code) for name, code in hooks.items()]
        patch = Patch(env=env, hooks=codes)
        return cls(patch, config, overlay_id=overlay_id, start=start, static_checks=static_checks)

    # --- the HookSet protocol -------------------------------------------------------------

    @property
    def isolated(self) -> bool:
        """True when the current (or last) worker reported every isolation layer in force."""
        return self._refused is None and self.report is not None and self.report.isolated

    @property
    def worker_pid(self) -> int | None:
        worker = self._worker
        return worker.pid if worker is not None else None

    def has(self, hook: HookName) -> bool:
        try:
            return HookName(hook) in self._hooks
        except ValueError:
            return False

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall:
        started = time.perf_counter()
        with self._lock:
            self.events["calls"] += 1
            if self.static_rejection is not None:
                self.events["invalid"] += 1
                detail = f"rejected by the static checks: {self.static_rejection}"
                return HookCall(state=state, fault=HookFaultKind.INVALID, detail=detail)
            if self.disabled_reason is not None:
                self._count_fault(HookFaultKind.DISABLED, _Fault("disabled", ""))
                return HookCall(
                    state=state, fault=HookFaultKind.DISABLED, detail=self.disabled_reason
                )
            try:
                value, new_state = self._call_locked(str(hook), ctx, state)
            except _Fault as fault:
                self._count_fault(fault.kind, fault)
                self._disable_if_over_budget()
                return HookCall(
                    state=state,
                    fault=fault.kind,
                    detail=fault.detail,
                    seconds=time.perf_counter() - started,
                )
            self.events["ok"] += 1
            return HookCall(value=value, state=new_state, seconds=time.perf_counter() - started)

    def probe(self, port: int = 0) -> dict[str, Any]:
        """Run the worker's self-test of its isolation (needs `enable_probe`); test use."""
        with self._lock:
            try:
                worker = self._ensure_worker()
                response = self._request(worker, {"op": "probe", "port": port}, 10.0)
            except _Fault as fault:
                raise RuntimeError(f"probe failed: {fault}") from None
            result = response.get("probe")
            if not isinstance(result, dict):
                raise RuntimeError(f"probe failed: {response}")
            return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._discard_worker()

    def __enter__(self) -> IsolatedHooks:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._closed = True
            self._discard_worker()
        except Exception:  # noqa: BLE001, S110 - nothing may escape a finaliser
            pass

    # --- internals ------------------------------------------------------------------------

    def _call_locked(
        self, hook: str, ctx: dict[str, Any], state: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        if self._closed:
            raise _Fault(HookFaultKind.CLOSED, "this hook set is closed")
        if hook not in self._sources:
            raise _Fault(HookFaultKind.INVALID, f"the patch has no {hook} hook")
        if self._refused is not None:
            raise _Fault(HookFaultKind.UNISOLATED_REFUSED, self._refused)
        worker = self._ensure_worker()
        if hook in self.load_errors:
            raise _Fault(HookFaultKind.INVALID, self.load_errors[hook])
        request = {"op": "call", "hook": hook, "ctx": ctx, "state": state}
        response = self._request(worker, request, self.config.call_budget_s)
        if "fault" in response:
            kind = str(response["fault"])
            if kind == HookFaultKind.MEMORY or self._grown(response):
                # a MemoryError leaves a heap nobody should trust with the next call
                self.events["recycles"] += 1
                self._discard_worker()
            if kind == HookFaultKind.VIOLATION:
                key = f"violations.{response.get('kind', 'unknown')}"
                self.events[key] = self.events.get(key, 0) + 1
            raise _Fault(
                kind if kind in FAULTS else HookFaultKind.JUNK, str(response.get("detail", ""))
            )
        new_state = response.get("state")
        if "value" not in response or not isinstance(new_state, dict):
            self._discard_worker()
            raise _Fault(HookFaultKind.JUNK, "malformed response from the worker")
        cpu = response.get("cpu")
        recycle_at = self.config.worker_cpu_seconds - 2 * self.config.cpu_seconds - 1
        if (isinstance(cpu, int | float) and cpu > recycle_at) or self._grown(response):
            self.events["recycles"] += 1
            self._discard_worker()  # planned: the next call starts a fresh worker
        return response["value"], new_state

    def _grown(self, response: dict[str, Any]) -> bool:
        """The worker's RSS is past `worker_rss_mb` after the call: what a hook keeps alive
        between calls (or leaks) must not accumulate in a warm worker."""
        rss = response.get("rss_mb")
        return isinstance(rss, int | float) and rss > self.config.worker_rss_mb

    def _disable_if_over_budget(self) -> None:
        """Every timeout or memory fault costs a worker kill and a restart; past
        `max_worker_kills` of them the patch is not called again (a patch that kills its worker
        on every call would otherwise restart it on every call, at the pace of the episodes)."""
        limit = self.config.max_worker_kills
        kills = {name: self.events.get(counter, 0) for name, counter in _KILLING.items()}
        total = sum(kills.values())
        if limit and total >= limit and self.disabled_reason is None:
            said = ", ".join(f"{n} {name}{'' if n == 1 else 's'}" for name, n in kills.items() if n)
            self.disabled_reason = (
                f"disabled after {said} (budget {self.config.call_budget_s:g} s "
                f"and {self.config.memory_mb} MB a call): make each hook call fast and small, "
                "with bounded loops and no backtracking regex"
            )
            self._discard_worker()
            log.info("sandbox.overlay_disabled", overlay=self.overlay_id, kills=kills)

    def _count_fault(self, kind: str, fault: _Fault) -> None:
        counter = FAULT_COUNTERS.get(kind, kind)
        self.events[counter] = self.events.get(counter, 0) + 1
        if self.metrics is not None:
            self.metrics.event(counter)
        log.debug("sandbox.hook_fault", overlay=self.overlay_id, fault=kind, detail=fault.detail)


def isolated_hooks_factory(
    config: SandboxConfig | None = None, metrics: SandboxMetrics | None = None
) -> Callable[[Patch, str], IsolatedHooks]:
    """The canary's hook-set factory: each candidate's patch in its own isolated worker, the
    candidate id as the overlay id stamped on its trajectories; `metrics` counts their events."""
    sandbox = config or SandboxConfig()

    def factory(patch: Patch, candidate_id: str) -> IsolatedHooks:
        return IsolatedHooks(patch, sandbox, overlay_id=candidate_id, metrics=metrics)

    return factory
