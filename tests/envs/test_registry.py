"""Env plugins: an installed package's `harness_r1.envs` entry point adds an env by name, and a
plugin that cannot serve is refused saying what is wrong.

The plugins here are installed for real: a package and its `.dist-info` (METADATA and
entry_points.txt) on the import path, found by `importlib.metadata` as pip's would be."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_r1.envs import BUILTIN_ENVS, EnvError, env_names, get_suite

PLUGIN_SOURCE = """
from dataclasses import replace
from harness_r1.envs import get_suite

SUITE = replace(get_suite("dbbench"), name="sqlplugin")
MISNAMED = replace(get_suite("dbbench"), name="something_else")
NOT_A_SUITE = {"name": "sqlplugin"}
"""


def install(site: Path, entries: dict[str, str]) -> None:
    """A distribution `envplugin` declaring `entries` (env name -> object path)."""
    (site / "envplugin").mkdir(exist_ok=True)
    (site / "envplugin" / "__init__.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    (site / "broken_plugin.py").write_text("raise RuntimeError('no database here')\n")
    info = site / "envplugin-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: envplugin\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[harness_r1.envs]\n{lines}", encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path


def test_without_plugins_the_builtin_envs_are_all(site: Path) -> None:
    assert env_names() == BUILTIN_ENVS == ("alfworld", "dbbench", "webshop")


def test_an_installed_plugin_is_found_by_name_and_serves_its_suite(site: Path) -> None:
    install(site, {"sqlplugin": "envplugin:SUITE"})
    assert env_names() == (*BUILTIN_ENVS, "sqlplugin")
    suite = get_suite("sqlplugin")
    assert suite.name == "sqlplugin" and suite.splits == get_suite("dbbench").splits


def test_a_plugin_cannot_take_a_builtin_name(site: Path) -> None:
    install(site, {"dbbench": "envplugin:MISNAMED"})
    assert env_names() == BUILTIN_ENVS
    assert get_suite("dbbench").name == "dbbench"


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("broken_plugin:SUITE", "does not load: RuntimeError: no database here"),
        ("envplugin:NOT_A_SUITE", "is a dict, not an EnvSuite"),
        ("envplugin:MISNAMED", "holds the suite 'something_else': the names must agree"),
        ("envplugin:NOWHERE", "does not load: AttributeError"),
    ],
)
def test_a_plugin_that_cannot_serve_is_refused_saying_what_is_wrong(
    site: Path, target: str, said: str
) -> None:
    install(site, {"sqlplugin": target})
    with pytest.raises(EnvError, match="env plugin 'sqlplugin'") as refused:
        get_suite("sqlplugin")
    assert said in str(refused.value) and target in str(refused.value)


def test_an_unknown_env_lists_the_plugins_too(site: Path) -> None:
    install(site, {"sqlplugin": "envplugin:SUITE"})
    with pytest.raises(KeyError, match="known: alfworld, dbbench, webshop, sqlplugin"):
        get_suite("nethack")
