"""Readers for the deploy kit's files (Dockerfiles, compose.yaml, the Makefile's install lines,
the systemd EnvironmentFile) and the check that a HARNESS_R1_* variable names a real setting.
Used by the test_deploy_* modules beside this one."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "ops"
PREFIX = "HARNESS_R1_"
#: Variables read outside the Settings model: the YAML file's path, and the test-only escape of
#: hosts without Landlock.
NOT_SETTINGS = {"HARNESS_R1_CONFIG", "HARNESS_R1_ALLOW_NO_ISOLATION"}


# --- Dockerfiles -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, ENV, ...
    args: str  # continuation lines joined, comment lines dropped
    stage: int  # 0-based index of the FROM it belongs to (-1: before the first FROM)


def dockerfile(path: Path) -> list[Instruction]:
    """The instructions of a Dockerfile, as Docker's parser reads them: `\\` continues a line,
    comment lines are dropped (also inside a continuation), parser directives are ignored."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if not text:
            continue
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, args.strip(), stage))
    assert not pending, f"{path}: the last line ends with a continuation"
    return instructions


def shell_commands(run_args: str) -> list[list[str]]:
    """The commands of a RUN line in shell form, split at `&&`, each as argv (`\\`-joined)."""
    return [shlex.split(part) for part in run_args.split("&&") if part.strip()]


def pip_installs(commands: list[list[str]]) -> list[list[str]]:
    """The argv after `pip install` of each pip install command (`python -m pip` too), with
    -q/--quiet dropped (output only)."""
    found = []
    for argv in commands:
        words = list(argv)
        while words and words[0].startswith("$("):  # $(PY) in the Makefile
            words.pop(0)
        if words[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]):
            words = words[2:]
        elif words[:2] == ["-m", "pip"]:  # $(PY) -m pip
            words = words[1:]
        if words[:2] == ["pip", "install"]:
            found.append([w for w in words[2:] if w not in ("-q", "--quiet")])
    return found


def dockerfile_pip_installs(path: Path) -> list[list[str]]:
    installs: list[list[str]] = []
    for instruction in dockerfile(path):
        if instruction.keyword == "RUN":
            installs += pip_installs(shell_commands(instruction.args))
    return installs


def makefile_pip_installs(path: Path, target: str = "$(STAMP)") -> list[list[str]]:
    """pip install lines of the recipe of `target` (the Makefile's install step)."""
    commands, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{target}:"):
            inside = True
        elif inside and line.startswith("\t"):
            if "pip install" in line:
                commands.append(shlex.split(line.strip()))
        elif inside and line.strip():
            break
    assert commands, f"{path}: no pip install in the recipe of {target}"
    return pip_installs(commands)


_EXTRAS = re.compile(r"^(?:-e\s*)?\.\[(?P<extras>[a-z0-9_,\- ]+)\]$")


def project_extras(installs: list[list[str]]) -> set[str] | None:
    """The extras of the install of the project itself (`.[a,b]`, or `-e .[a,b]`)."""
    for argv in installs:
        for word in argv:
            match = _EXTRAS.match(word)
            if match:
                return {e.strip() for e in match["extras"].split(",") if e.strip()}
    return None


def env_values(instructions: list[Instruction]) -> dict[str, str]:
    """ENV KEY=VALUE pairs of the final stage (later ones win)."""
    last = max(i.stage for i in instructions)
    values: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "ENV" and instruction.stage == last:
            for word in shlex.split(instruction.args):
                key, sep, value = word.partition("=")
                assert sep, f"ENV {instruction.args!r}: use KEY=VALUE"
                values[key] = value
    return values


# --- compose ---------------------------------------------------------------------------------

_VAR = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?:(?P<op>:-|:\?|-|\?)(?P<arg>[^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} with `env`; `$$` is a literal `$`."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if name in env and (env[name] or op not in (":-", ":?")):
            return env[name]
        if op in (":?", "?"):
            raise KeyError(f"{name} is required: {arg}")
        return arg or ""

    parts = value.split("$$")
    return "$".join(_VAR.sub(one, part) for part in parts)


def compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """ops/compose.yaml as Compose reads it: anchors and merge keys resolved (PyYAML's safe
    loader does both), then interpolated with `env`."""
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    return interpolate(data, env or {}) if env is not None else data


# --- the EnvironmentFile ---------------------------------------------------------------------


def environment_file(path: Path, *, commented: bool = False) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile; `commented`: also `#KEY=VALUE` examples."""
    values = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if commented and re.match(r"^#[A-Z][A-Z0-9_]*=", line):
            line = line[1:]
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: {raw!r} is not KEY=VALUE"
        values[key.strip()] = value.strip()
    return values


# --- settings --------------------------------------------------------------------------------


def unknown_setting_variables(names: list[str]) -> list[str]:
    """The HARNESS_R1_* names among `names` that no setting reads (a misspelt variable is
    silently ignored by the settings loader when it is a flat one)."""
    from pydantic import BaseModel

    from harness_r1.daemon.settings import Settings

    unknown = []
    for name in names:
        if not name.startswith(PREFIX) or name in NOT_SETTINGS:
            continue
        key = name[len(PREFIX) :].lower()
        group, nested, field = key.partition("__")
        info = Settings.model_fields.get(group)
        if info is None:
            unknown.append(name)
            continue
        if nested:
            model = info.annotation
            is_group = isinstance(model, type) and issubclass(model, BaseModel)
            if not is_group or field not in model.model_fields:
                unknown.append(name)
    return unknown
