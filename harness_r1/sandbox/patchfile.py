"""Patch files on disk: a Patch as JSON, engineer output, or the sectioned `.patch` format.

The `.patch` format keeps hand-written patches readable as Python (reference patches, teacher
examples): header comments `# env: NAME` and `# description: ...` (continued on following
`#   ` lines), then one section per hook introduced by `# === hook: NAME ===`, or
`# === hook: NAME (replace) ===` / `(remove)` (no code) for a link that changes the incumbent's.
The engineer's output uses the same sections (`sandbox.parse.read_sections`), read loosely for
a small model's drift: a file's section lines may vary in spaces and `=`
(an indented one is a section line too), an unknown `(mode)` is an error instead of code, and
an empty section's code is "" (it was "\n"). The shipped reference patches read the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness_r1.contracts import Patch
from harness_r1.sandbox.parse import SectionError, parse_engineer_output, read_sections

REFERENCE_DIR = Path(__file__).parent / "reference_patches"


class PatchFileError(ValueError):
    pass


def parse_sectioned(text: str, source: str = "<patch>") -> Patch:
    """The Patch of a `.patch` file (`sandbox.parse.read_sections`, with its env required)."""
    try:
        data = read_sections(text)
    except SectionError as err:
        raise PatchFileError(f"{source}: {err}") from err
    if "env" not in data:
        raise PatchFileError(f"{source}: header lacks '# env: NAME'")
    try:
        return Patch.model_validate(data)
    except ValueError as err:
        raise PatchFileError(f"{source}: {err}") from err


def load_patch_file(path: Path, env: str | None = None) -> Patch:
    """Read a patch from `.patch` (sectioned), `.json` (Patch) or any engineer-output text."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".patch":
        return parse_sectioned(text, str(path))
    if path.suffix == ".json":
        try:
            return Patch.model_validate(json.loads(text))
        except (ValueError, TypeError) as err:
            raise PatchFileError(f"{path}: not a Patch JSON: {err}") from err
    result = parse_engineer_output(text, env=env)
    if result.patch is None:
        raise PatchFileError(f"{path}: {result.code}: {result.message}")
    return result.patch


def reference_patches(env: str | None = None) -> dict[str, Patch]:
    """The hand-written reference patches shipped with the package, by file stem."""
    patches = {p.stem: load_patch_file(p) for p in sorted(REFERENCE_DIR.glob("*.patch"))}
    return {name: patch for name, patch in patches.items() if env is None or patch.env == env}
