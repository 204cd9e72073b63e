"""Does the hook sandbox hold on this host, container or unit? Prints each isolation layer.

Starts one hook worker the way the canary does (the `sandbox` settings in effect, from
HARNESS_R1_SANDBOX__* or the YAML file; a reference patch; the same interpreter), prints the
layers the worker reports, and exits 0 when every layer is in force, 1 when any failed
(then every patch would be refused: fail closed). It runs no model and needs no service.

    docker run --rm --entrypoint python harness-r1:cpu /opt/harness-r1/sandbox_probe.py
    /opt/harness-r1/bin/python ops/sandbox_probe.py          # a systemd host, as its user
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harness_r1.daemon.settings import load_settings
from harness_r1.sandbox import REFERENCE_DIR, IsolatedHooks, load_patch_file


def _children() -> list[int]:
    """Processes whose parent is this one, zombies included (close() reaps the worker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


def main() -> int:
    settings = load_settings()
    patch = load_patch_file(REFERENCE_DIR / "dbbench_lookup.patch")
    hooks = IsolatedHooks(patch, settings.sandbox.sandbox_config(), overlay_id="sandbox-probe")
    try:
        report = hooks.report
        if report is None:
            print("FAIL the hook worker did not start (see the log lines above)")
            return 1
        for layer in report.layers:
            print(f"{'ok  ' if layer.ok else 'FAIL'} {layer.name}: {layer.detail}")
        print(
            f"uid={report.uid} gid={report.gid} landlock_abi={report.landlock_abi} "
            f"shared_uid={report.shared_uid} "
            f"accept_shared_uid={settings.sandbox.accept_shared_uid}"
        )
        if not report.isolated:
            print("NOT ISOLATED: every patch would be refused; see ops/README.md")
            return 1
    finally:
        hooks.close()
    deadline = time.monotonic() + 5
    while _children() and time.monotonic() < deadline:
        time.sleep(0.1)
    if _children():
        # Started as root the worker runs as uid 65534: killing it needs CAP_KILL.
        print("FAIL close() did not kill and reap the hook worker: CAP_KILL missing?")
        return 1
    print("isolated: every layer is in force; the worker was stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
