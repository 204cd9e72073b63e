"""A host that is not root: the worker cannot take a uid of its own.

Its uid layer fails (every patch refused) unless `accept_shared_uid` accepts a shared uid, and
then Landlock's read denial must be what keeps it out of its parent's /proc files: the
read-exposure probe runs with a parent of the same uid, whose environ holds a secret.

On a root host (CI) the non-root host is real, not imitated: a child Python runs as uid 65533
and starts the worker itself. It needs an interpreter that user may execute (the venv's lives
under /root, mode 0700): the system's python of the same minor version, with the venv's
packages on its path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

PROJECT = Path(__file__).resolve().parents[2]
NOBODY_ELSE = 65533
SECRET = "hr1-shared-uid-secret"

PROBE = """
import json, os, sys
from prometheus_client import CollectorRegistry
from harness_r1.contracts import HookCode, Patch
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.metrics import SandboxMetrics
accept = sys.argv[1] == "accept"
code = "def hook(ctx, state):\\n    return None\\n"
patch = Patch(env="any", hooks=[HookCode(hook="pre_action", code=code)])
config = SandboxConfig(accept_shared_uid=accept, enable_probe=True, python=sys.executable)
registry = CollectorRegistry()
secret = os.environ["HR1_SECRET"]
out = {"uid": os.getuid(), "environ_has_secret": secret in open("/proc/self/environ").read()}
with IsolatedHooks(patch, config, metrics=SandboxMetrics(registry)) as hs:
    call = hs.call("pre_action", {}, {})
    out["fault"], out["detail"] = call.fault, call.detail
    out["isolated"] = hs.isolated
    out["report"] = hs.report.to_dict() if hs.report else None
    if hs.isolated:
        out["probe"] = hs.probe()
out["shared_uid_metric"] = registry.get_sample_value("harness_r1_sandbox_shared_uid")
print("RESULT " + json.dumps(out))
"""


def _system_python() -> str | None:
    """An interpreter uid 65533 can execute, of the venv's minor version (its compiled
    packages must load), or None."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _run_probe(accept: bool) -> dict[str, Any]:
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "HR1_SECRET": SECRET}
    if os.geteuid() == 0:
        python = _system_python()
        if python is None:
            pytest.skip("no system python of the venv's version that uid 65533 may execute")
        site = sysconfig.get_paths()["purelib"]
        env["PYTHONPATH"] = f"{PROJECT}:{site}"
        extra: dict[str, Any] = {"user": NOBODY_ELSE, "group": NOBODY_ELSE, "extra_groups": []}
    else:
        python, extra = sys.executable, {}
        env["PYTHONPATH"] = str(PROJECT)
    done = subprocess.run(  # noqa: S603 - our own probe script
        [python, "-c", PROBE, "accept" if accept else "refuse"],
        env=env,
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **extra,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["uid"] == (os.getuid() if os.geteuid() != 0 else NOBODY_ELSE)
    assert result["environ_has_secret"]  # the parent really holds what the worker must not read
    return result


def test_not_root_the_uid_layer_fails_and_every_patch_is_refused() -> None:
    result = _run_probe(accept=False)
    assert not result["isolated"]
    assert result["fault"] == "unisolated_refused"
    failed = {layer["name"]: layer for layer in result["report"]["layers"] if not layer["ok"]}
    assert list(failed) == ["uid"]
    assert "would share uid" in failed["uid"]["detail"]
    assert "accept_shared_uid" in failed["uid"]["detail"]
    assert result["shared_uid_metric"] in (None, 0.0)  # refused: not reported as running shared


def test_not_root_with_a_shared_uid_accepted_the_parents_proc_stays_unreadable() -> None:
    result = _run_probe(accept=True)
    assert result["isolated"] and result["fault"] is None, result
    report = result["report"]
    assert report["shared_uid"] and report["uid"] == result["uid"]
    assert result["shared_uid_metric"] == 1.0  # said to the operator, not only in the log
    probe = result["probe"]
    assert probe["uid"] == result["uid"]  # the worker really has its parent's uid
    for name in ("read_parent_environ", "read_parent_cmdline", "read_own_environ", "read_passwd"):
        outcome = probe[name]
        assert not outcome["ok"] and outcome["errno"] == 13, (name, outcome)
    assert SECRET not in json.dumps(probe)


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops to its own uid only as root")
def test_as_root_the_worker_takes_a_uid_of_its_own_and_no_shared_uid_is_reported() -> None:
    code = "def hook(ctx, state):\n    return None\n"
    with IsolatedHooks.from_sources({"pre_action": code}, SandboxConfig()) as hs:  # type: ignore[dict-item]
        assert hs.call("pre_action", {}, {}).fault is None  # type: ignore[arg-type]
        assert hs.report is not None and not hs.report.shared_uid
        assert hs.report.uid == 65534
