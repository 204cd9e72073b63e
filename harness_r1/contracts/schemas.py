"""JSON Schema export of every message (docs/schemas is the committed copy)."""

from __future__ import annotations

import json
from pathlib import Path

from harness_r1.contracts import MESSAGES


def render_schemas() -> dict[str, str]:
    """File name -> schema text, deterministic so the committed copies can be compared."""
    return {
        f"{name}.schema.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for name, model in sorted(MESSAGES.items())
    }


def export_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, text in render_schemas().items():
        path = directory / file_name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
