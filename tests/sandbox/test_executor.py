"""IsolatedHooks built, refused and closed, as its operators see it: a patch the static checks
reject never starts a worker, the canary's factory and `from_sources` build checked hook sets,
missing isolation is refused loudly (or, when allowed, run with a warning), and a closed hook
set answers `closed`, leaving no worker, pipe or descriptor behind.

What each call's outcome is and how it is recorded is in test_executor_faults.py; what the
worker runs under and how it starts, in test_executor_worker.py; the shared hook and helpers in
executor_rig.py."""

from __future__ import annotations

import os
import signal

import pytest
import structlog
from executor_rig import ACTOR, FORCED, NO_EVENTS, PRE, hooks, metric_events, outcome, wait_dead
from prometheus_client import CollectorRegistry

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.harness.hooks import HookCall
from harness_r1.sandbox.executor import IsolatedHooks, isolated_hooks_factory
from harness_r1.sandbox.metrics import SandboxMetrics
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.static import check_patch


def test_a_rejected_patch_reports_its_first_violation_and_never_starts() -> None:
    code = "import os\ndef hook(ctx, state):\n    return open('x')\n"
    patch = Patch(env="any", hooks=[HookCode(hook=PRE, code=code)])
    first = check_patch(patch).violations[0]
    hs = IsolatedHooks(patch, overlay_id="ov-5")
    hs.call(PRE, {}, {})
    result = hs.call(PRE, {}, {"k": 1})
    assert result == HookCall(
        state={"k": 1},
        fault="invalid",
        detail=f"rejected by the static checks: {first.code}: {first.message}",
    )
    assert hs.static_rejection == f"{first.code}: {first.message}"
    assert (hs.worker_pid, hs.report, hs.last_start_s, hs.isolated) == (None, None, None, False)
    assert hs.has(PRE) and not hs.has(HookName.POST_FEEDBACK) and not hs.has("nope")  # type: ignore[arg-type]
    assert hs.events == {**NO_EVENTS, "calls": 2, "invalid": 2}
    hs.close()


def test_the_canary_factory_builds_checked_hook_sets_named_by_candidate() -> None:
    bad = Patch(
        env="any", hooks=[HookCode(hook=PRE, code="import os\ndef hook(c, s):\n    pass\n")]
    )
    config = SandboxConfig(call_budget_s=0.3)
    made = isolated_hooks_factory(config)(bad, "cand-7")
    assert made.overlay_id == "cand-7" and made.config is config
    assert made.static_rejection is not None and made.worker_pid is None
    default = isolated_hooks_factory()(bad, "cand-8")
    assert default.config == SandboxConfig() and default.overlay_id == "cand-8"


def test_from_sources_runs_the_static_checks_when_asked() -> None:
    code = "import os\ndef hook(ctx, state):\n    return None\n"
    hs = IsolatedHooks.from_sources({PRE: code}, static_checks=True)
    assert hs.static_rejection is not None and hs.worker_pid is None
    assert hs.call(PRE, {}, {}).fault == "invalid"


def test_from_sources_builds_an_any_env_patch_and_starts_its_worker(actor_patch: Patch) -> None:
    with IsolatedHooks.from_sources({PRE: ACTOR}) as hs:
        assert hs.overlay_id == f"patch-{actor_patch.sha256()[:16]}"
        assert hs.config == SandboxConfig() and hs.worker_pid is not None


# --- refusing missing isolation ---------------------------------------------------------


def test_missing_isolation_is_refused_loudly_and_counted(actor_patch: Patch) -> None:
    registry = CollectorRegistry()
    config = SandboxConfig(fail_layer="seccomp")
    with structlog.testing.capture_logs() as logs:
        hs = IsolatedHooks(
            actor_patch,
            config,
            overlay_id="ov-3",
            static_checks=False,
            metrics=SandboxMetrics(registry),
        )
        result = hs.call(PRE, {}, {"s": 1})
    refused = f"isolation incomplete (seccomp: {FORCED}); untrusted hooks refused"
    assert outcome(result) == HookCall(state={"s": 1}, fault="unisolated_refused", detail=refused)
    assert hs.worker_pid is None and not hs.isolated
    assert hs.events == {**NO_EVENTS, "calls": 1, "starts": 1, "start_failures": 1, "refused": 1}
    assert metric_events(registry) == {"starts": 1.0, "refused": 1.0}
    assert registry.get_sample_value("harness_r1_sandbox_isolated") == 0.0
    assert logs == [
        {"event": "sandbox.unisolated_refused", "log_level": "error", "overlay": "ov-3",
         "failed": {"seccomp": FORCED},
         "hint": "fix the host, or pass allow_unisolated=True for development only"},
        {"event": "sandbox.worker_start_failed", "log_level": "error", "overlay": "ov-3",
         "detail": refused, "retry_in_s": 0.5},
        {"event": "sandbox.hook_fault", "log_level": "debug", "overlay": "ov-3",
         "fault": "unisolated_refused", "detail": refused},
    ]  # fmt: skip
    hs.close()


def test_running_unisolated_when_allowed_is_logged_as_a_warning() -> None:
    config = SandboxConfig(fail_layer="landlock", allow_unisolated=True)
    with (
        structlog.testing.capture_logs() as logs,
        IsolatedHooks.from_sources({PRE: ACTOR}, config, overlay_id="ov-4") as hs,
    ):
        assert outcome(hs.call(PRE, {"echo": 2}, {})) == HookCall(value=2, state={"n": 1})
    assert logs == [
        {"event": "sandbox.RUNNING_UNISOLATED", "log_level": "warning", "overlay": "ov-4",
         "failed": {"landlock": FORCED},
         "note": "allow_unisolated=True: model-written code runs without full isolation"},
    ]  # fmt: skip
    assert hs.events == {**NO_EVENTS, "calls": 1, "ok": 1, "starts": 1, "unisolated_workers": 1}


def test_a_probe_of_a_refused_hook_set_says_it_was_refused(actor_patch: Patch) -> None:
    """Once isolation was found missing, every later use is refused with the same reason,
    the self-test included (it must not start a worker behind the refusal)."""
    hs = IsolatedHooks(actor_patch, SandboxConfig(fail_layer="seccomp"), static_checks=False)
    refused = f"isolation incomplete (seccomp: {FORCED}); untrusted hooks refused"
    with pytest.raises(RuntimeError) as raised:
        hs.probe()
    assert str(raised.value) == f"probe failed: unisolated_refused: {refused}"
    assert hs.worker_pid is None
    hs.close()


# --- closing --------------------------------------------------------------------------------


def test_a_closed_hook_set_answers_closed_and_starts_nothing() -> None:
    hs = hooks()
    hs.close()
    assert outcome(hs.call(PRE, {}, {"s": 1})) == HookCall(
        state={"s": 1}, fault="closed", detail="this hook set is closed"
    )
    with pytest.raises(RuntimeError, match="^probe failed: closed: this hook set is closed$"):
        hs.probe()
    assert hs.worker_pid is None
    assert hs.events == {**NO_EVENTS, "calls": 1, "starts": 1, "closed": 1}


def test_close_releases_the_worker_and_every_pipe_to_it() -> None:
    """Closing kills and reaps the worker and closes our three pipe ends (an agent swaps
    overlays for days: a leaked descriptor per swap would run it out of them)."""
    h = hooks()
    worker = h._worker
    assert worker is not None
    streams = (worker.proc.stdin, worker.proc.stdout, worker.proc.stderr)
    h.close()
    assert worker.proc.returncode is not None
    assert all(stream is not None and stream.closed for stream in streams)


def test_close_after_the_worker_died_and_was_reaped_does_not_raise() -> None:
    """The worker can be gone before we close (killed, crashed, reaped): its process group
    no longer exists, and closing must still succeed."""
    h = hooks()
    worker = h._worker
    assert worker is not None
    worker.proc.kill()
    worker.proc.wait(timeout=5)
    h.close()
    assert h._worker is None


def test_restarts_leave_no_descriptor_behind(actor: IsolatedHooks) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    actor.call(PRE, {}, {})
    before = fds()
    for _ in range(3):
        pid = actor.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        actor.call(PRE, {}, {})
        assert actor.call(PRE, {}, {}).fault is None
    assert fds() == before
