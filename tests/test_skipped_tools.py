"""The end of `make test` names the tools whose absence skipped tests (tests/skipped_tools.py),
with the command that installs them; the packages it names are ones `make test-deps` installs."""

from __future__ import annotations

import re
from pathlib import Path

from skipped_tools import missing_packages, summary

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def test_the_skip_reasons_name_their_packages() -> None:
    reasons = [
        "prometheus not installed (Debian package prometheus)",
        "promtool not installed (Debian package prometheus)",
        "no Compose binary: neither `docker compose` (the v2 plugin) nor `docker-compose` "
        "(apt-get install docker-compose) is installed",
        "needs a GPU",
    ]
    found = missing_packages(reasons)
    assert found == {"prometheus": 2, "docker-compose": 1}
    lines = summary(found)
    assert lines[0].startswith("3 tests skipped for tools this machine lacks")
    assert "make test-deps" in lines[1] and "docker-compose prometheus" in lines[1]
    assert summary(missing_packages(["needs a GPU"])) == []


def test_make_test_deps_installs_every_package_a_skip_names() -> None:
    """Every "(Debian package X)" or "apt-get install X" in the tests is in TEST_DEBS."""
    tests = Path(__file__).resolve().parent
    named: set[str] = set()
    for path in tests.rglob("*.py"):
        named |= set(missing_packages([path.read_text(encoding="utf-8")]))
    debs = re.search(r"^TEST_DEBS := (.*)$", MAKEFILE.read_text(), re.M)
    assert debs is not None
    assert named - {"X", "NAME"} <= set(debs.group(1).split()), named
