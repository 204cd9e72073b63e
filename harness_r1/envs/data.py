"""Where benchmark data lives, and the error a user sees when a file is missing or malformed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEFAULT_DATA_CANDIDATES = ("../shared/benchmarks",)


class DataError(RuntimeError):
    """A data file is missing or malformed; the message names the file and what is wrong."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def default_data_root(cwd: Path | None = None) -> Path | None:
    """`../shared/benchmarks` relative to the working directory or to the source checkout."""
    checkout = Path(__file__).resolve().parents[2]
    for base in (cwd or Path.cwd(), checkout):
        for candidate in DEFAULT_DATA_CANDIDATES:
            path = (base / candidate).resolve()
            if path.is_dir():
                return path
    return None


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise DataError(path, "file is missing (run `harness-r1 data status` / `data fetch`)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(path, f"not valid JSON: {err.msg} at line {err.lineno}") from err


def read_jsonl(path: Path) -> list[Any]:
    if not path.is_file():
        raise DataError(path, "file is missing (run `harness-r1 data status` / `data fetch`)")
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DataError(path, f"line {number} is not valid JSON: {err.msg}") from err
    return rows


def require_keys(path: Path, where: str, row: dict[str, Any], keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise DataError(path, f"{where} lacks field(s) {', '.join(missing)}")
