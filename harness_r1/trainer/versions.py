"""Published engineer adapters: `engineer/vNNNN/` (a peft adapter and `metadata.json`; the
tokenizer is the base model's), numbered atomically and never overwritten; shared by SFT, GRPO
and the daemon."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.errors import TrainingError

log = structlog.get_logger(__name__)


ENGINEER_DIR = "engineer"


METADATA_FILE = "metadata.json"


VERSION_RE = re.compile(r"^v(\d{4,})$")


@dataclass(frozen=True)
class TrainResult:
    """A published version: its directory, name (`v0001`) and metadata (as written)."""

    version_dir: Path
    version: str
    metadata: dict[str, Any] = field(default_factory=dict)


def versions_dir(root: Path) -> Path:
    return Path(root) / ENGINEER_DIR


def version_number(path: Path) -> int | None:
    match = VERSION_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_versions(root: Path) -> list[Path]:
    """Published versions under `root/engineer/`, oldest first."""
    directory = versions_dir(root)
    if not directory.is_dir():
        return []
    found = [(version_number(p), p) for p in directory.iterdir() if p.is_dir()]
    return [p for n, p in sorted((n, p) for n, p in found if n is not None)]


def latest_version(root: Path) -> Path | None:
    versions = list_versions(root)
    return versions[-1] if versions else None


def read_metadata(version_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(version_dir) / METADATA_FILE).read_text())
    return data


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def publish_version(
    root: Path, write: Callable[[Path], None], metadata: Mapping[str, Any]
) -> TrainResult:
    """Write a new version: `write(tmp_dir)` saves the adapter, then `metadata.json` (with the
    version name) goes next to it and the directory is renamed to the next free `vNNNN`. A
    rename onto a version that appeared meanwhile fails (versions are never empty), and the
    next number is tried: concurrent publishers never overwrite each other."""
    directory = versions_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        latest = latest_version(root)
        number = (version_number(latest) or 0) + 1 if latest is not None else 1
        for _ in range(1000):
            name = f"v{number:04d}"
            data = {**metadata, "version": name}
            write_json(tmp / METADATA_FILE, data)
            target = directory / name
            if not target.exists():
                try:
                    os.rename(tmp, target)
                except OSError:  # another publisher took it between the check and the rename
                    pass
                else:
                    log.info("engineer version published", version=name, path=str(target))
                    return TrainResult(version_dir=target, version=name, metadata=data)
            number += 1
        raise TrainingError(f"could not allocate a version under {directory}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parent_version(adapter: Path | None) -> str | None:
    """The version an adapter was published as (`v0001`), its path if it is not a version,
    None when training starts from the base model."""
    if adapter is None:
        return None
    return Path(adapter).name if version_number(Path(adapter)) is not None else str(adapter)
