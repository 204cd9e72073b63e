"""Patch files on disk: a Patch as JSON, engineer output, or the sectioned `.patch` format.

The `.patch` format keeps hand-written patches readable as Python (reference patches, teacher
examples): header comments `# env: NAME` and `# description: ...` (continued on following
`#   ` lines), then one section per hook introduced by `# === hook: NAME ===`, or
`# === hook: NAME (replace) ===` / `(remove)` (no code) for a link that changes the incumbent's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness_r1.contracts import HookCode, HookMode, HookName, Patch
from harness_r1.sandbox.parse import parse_engineer_output

_SECTION = re.compile(r"^# === hook: (\w+)(?: \((add|replace|remove)\))? ===\s*$", re.MULTILINE)
REFERENCE_DIR = Path(__file__).parent / "reference_patches"


class PatchFileError(ValueError):
    pass


def parse_sectioned(text: str, source: str = "<patch>") -> Patch:
    header, *sections = _SECTION.split(text)
    if not sections:
        raise PatchFileError(f"{source}: no '# === hook: NAME ===' section")
    env = re.search(r"^# env: (\S+)", header, re.MULTILINE)
    if env is None:
        raise PatchFileError(f"{source}: header lacks '# env: NAME'")
    description_lines = []
    collecting = False
    for line in header.splitlines():
        if line.startswith("# description:"):
            collecting = True
            description_lines.append(line.removeprefix("# description:").strip())
        elif collecting and line.startswith("#   "):
            description_lines.append(line.removeprefix("#").strip())
        else:
            collecting = False
    hooks = []
    for name, mode, code in zip(sections[::3], sections[1::3], sections[2::3], strict=True):
        try:
            hook = HookName(name)
        except ValueError as err:
            raise PatchFileError(f"{source}: unknown hook section {name!r}") from err
        if mode == HookMode.REMOVE:
            if code.strip():
                raise PatchFileError(f"{source}: a '(remove)' section carries no code")
            hooks.append(HookCode(hook=hook, mode=HookMode.REMOVE))
            continue
        hooks.append(HookCode(hook=hook, code=code.strip() + "\n", mode=HookMode(mode or "add")))
    return Patch(env=env.group(1), description=" ".join(description_lines), hooks=hooks)


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
