"""ops/sandbox_probe.py, the check an operator runs in the container or under the unit: it
starts a real hook worker with the settings in effect and says whether every isolation layer
holds. Run here as this user; and, when this test runs as root with `setpriv`, under the two
identities the kit deploys with: the image's non-root user (uid 65534 here; with
accept_shared_uid every layer holds, without it the uid layer fails and patches would be
refused), and the unit's root variant (root with only CAP_SETUID, CAP_SETGID and CAP_KILL:
without CAP_KILL the daemon cannot stop a worker that dropped to uid 65534)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import DEPLOY, REPO

PROBE = DEPLOY / "sandbox_probe.py"
SETPRIV = shutil.which("setpriv")
NOBODY = 65534


def _env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_R1_")}
    return {**keep, "HOME": "/tmp", **extra}


def _probe(prefix: list[str], python: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, python, str(PROBE)], capture_output=True, text=True, timeout=120, env=env
    )


def test_the_probe_passes_here() -> None:
    if os.environ.get("HARNESS_R1_ALLOW_NO_ISOLATION") == "1":
        pytest.skip("HARNESS_R1_ALLOW_NO_ISOLATION=1: this host lacks Landlock or seccomp")
    accept = "false" if os.geteuid() == 0 else "true"
    done = _probe([], sys.executable, _env(HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID=accept))
    assert done.returncode == 0, done.stdout + done.stderr
    for layer in ("uid", "nnp", "landlock", "seccomp"):
        assert f"ok   {layer}:" in done.stdout
    assert "isolated: every layer is in force" in done.stdout


def _as_root_with_setpriv() -> None:
    if os.environ.get("HARNESS_R1_ALLOW_NO_ISOLATION") == "1":
        pytest.skip("HARNESS_R1_ALLOW_NO_ISOLATION=1: this host lacks Landlock or seccomp")
    if os.geteuid() != 0:
        pytest.skip("changing identity needs root (this test runs as another user)")
    if SETPRIV is None:
        pytest.skip("setpriv not installed (Debian package util-linux)")


#: What the probe needs of its interpreter as uid 65534: our packages, and to start itself again
#: (the hook worker is sys.executable).
_CAN_RUN = (
    "import subprocess, sys, harness_r1.daemon.settings, pyseccomp; "
    "subprocess.run([sys.executable, '-c', 'pass'], check=True)"
)


def _python_for_nobody() -> tuple[str, dict[str, str]]:
    """An interpreter uid 65534 can run, with this checkout and the venv's packages: this one
    if it can read it, else the system's python3 of the same minor version."""
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    env = _env(PYTHONPATH=f"{REPO}{os.pathsep}{site}")
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"]
    for python in [c for c in candidates if Path(c).is_file()]:
        tried = subprocess.run(
            [SETPRIV or "", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            + [python, "-c", _CAN_RUN],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        if tried.returncode == 0:
            return python, env
    pytest.skip(
        f"no Python {sys.version_info[0]}.{sys.version_info[1]} that uid {NOBODY} can run "
        "with this checkout's packages"
    )


NON_ROOT = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def test_non_root_with_the_shared_uid_accepted_is_isolated() -> None:
    _as_root_with_setpriv()
    python, env = _python_for_nobody()
    done = _probe(
        [SETPRIV or "", *NON_ROOT], python, {**env, "HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID": "true"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   uid: not root: shares uid 65534" in done.stdout
    assert "shared_uid=True" in done.stdout


def test_non_root_without_it_would_refuse_every_patch() -> None:
    _as_root_with_setpriv()
    python, env = _python_for_nobody()
    done = _probe(
        [SETPRIV or "", *NON_ROOT],
        python,
        {**env, "HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID": "false"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL uid: not root" in done.stdout
    assert "NOT ISOLATED" in done.stdout


@pytest.mark.parametrize(
    ("caps", "works"),
    [("-all,+setuid,+setgid,+kill", True), ("-all,+setuid,+setgid", False)],
    ids=["with-CAP_KILL", "without-CAP_KILL"],
)
def test_the_units_root_variant_needs_exactly_its_capabilities(caps: str, works: bool) -> None:
    _as_root_with_setpriv()
    done = _probe(
        [SETPRIV or "", "--no-new-privs", f"--bounding-set={caps}"],
        sys.executable,
        _env(HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID="false"),
    )
    assert "ok   uid: dropped to uid 65534" in done.stdout, done.stdout + done.stderr
    if works:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode == 1 and "CAP_KILL" in done.stdout, done.stdout + done.stderr
