"""`harness-r1 patch check FILE`: parse a file (engineer output, a bare patch JSON, or the
sectioned `.patch` format), run the
static checks and report. Exit codes: 0 accepted, 1 rejected by the static checks,
2 unreadable or unparseable (including `too_large`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_r1.sandbox import (
    MAX_INPUT_CHARS,
    PatchFileError,
    StaticLimits,
    check_patch,
    first_violation,
    parse_engineer_output,
    parse_sectioned,
)

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_UNREADABLE = 2


def check_file(
    path: Path, env: str | None = None, limits: StaticLimits | None = None
) -> tuple[dict[str, Any], int]:
    """The JSON-able report for one file, and the process exit code."""
    report: dict[str, Any] = {"file": str(path), "ok": False, "stage": "read"}
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_CHARS * 4:
            report["error"] = {
                "code": "too_large",
                "message": f"file is {size} bytes; the limit is {MAX_INPUT_CHARS * 4}",
            }
            return report, EXIT_UNREADABLE
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        report["error"] = {"code": "unreadable", "message": f"{type(err).__name__}: {err}"}
        return report, EXIT_UNREADABLE
    report["stage"] = "parse"
    if path.suffix == ".patch":
        try:
            patch = parse_sectioned(text, str(path))
        except (PatchFileError, ValueError) as err:
            report["error"] = {"code": "invalid_patch", "message": str(err)}
            return report, EXIT_UNREADABLE
    else:
        parsed = parse_engineer_output(text, env)
        report["parse"] = parsed.to_dict()
        if parsed.patch is None:
            report["error"] = {"code": str(parsed.code), "message": parsed.message}
            return report, EXIT_UNREADABLE
        patch = parsed.patch
    report["stage"] = "static"
    report["patch"] = {
        "env": patch.env,
        "description": patch.description,
        "hooks": [str(h.hook) for h in patch.hooks],
        "sha256": patch.sha256(),
    }
    static = check_patch(patch, limits)
    report["static"] = static.model_dump(mode="json")
    report["ok"] = static.ok
    first = first_violation(static)
    if first is not None:
        report["error"] = {"code": str(first.code), "message": first.message}
        return report, EXIT_REJECTED
    return report, EXIT_OK
