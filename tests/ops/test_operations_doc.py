"""docs/operations.md is the runbook the alerts point at: every alert's `runbook` annotation
names a section that exists, every `harness-r1 ...` command in it is one the CLI has (with
options it accepts), and every test it cites as the proof of a procedure exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from typer.main import get_command

from harness_r1.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"


def _anchors() -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", DOC.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_points_at_a_section_of_the_runbook() -> None:
    groups = yaml.safe_load((ROOT / "ops" / "prometheus" / "rules.yml").read_text())["groups"]
    anchors = _anchors()
    for rule in (r for g in groups for r in g["rules"] if "alert" in r):
        target = rule["annotations"]["runbook"]
        assert target.startswith("docs/operations.md#"), rule["alert"]
        assert target.split("#", 1)[1] in anchors, (rule["alert"], target)
        assert rule["alert"] in DOC.read_text(), f"{rule['alert']} is not named in the runbook"


def _commands() -> list[list[str]]:
    text = DOC.read_text().replace("\\\n", " ")
    found = re.findall(r"`(harness-r1 [^`]+)`", text)
    found += re.findall(r"^ {4}(harness-r1 .+)$", text, flags=re.MULTILINE)
    return [shlex.split(command)[1:] for command in found]


def test_every_command_in_the_runbook_exists_with_its_options() -> None:
    root = get_command(app)
    commands = _commands()
    assert len(commands) >= 12, commands
    for args in commands:
        words = [word.strip("[]") for word in args]
        options = [word.split("=")[0] for word in words if word.startswith("--")]
        group: Any = root
        names: list[str] = []
        accepted = {opt for param in root.params for opt in param.opts}
        for word in words:  # option values between the words are passed over
            sub = getattr(group, "commands", {}).get(word)
            if sub is not None:
                group, names = sub, [*names, word]
                accepted |= {opt for param in sub.params for opt in param.opts}
        assert names and not hasattr(group, "commands"), f"no such command: {args}"
        unknown = [opt for opt in options if opt not in accepted]
        assert not unknown, f"harness-r1 {' '.join(args)}: unknown options {unknown}"


def test_every_cited_test_exists() -> None:
    cited = set(re.findall(r"tests/[a-z_/]+\.py", DOC.read_text()))
    assert cited, "the runbook cites no tests"
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert not missing, missing
    text = DOC.read_text()
    for path, name in re.findall(r"(tests/[a-z_/]+\.py), (test_[a-z_]+)", text):
        assert f"def {name}" in (ROOT / path).read_text(), (path, name)
