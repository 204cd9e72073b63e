"""Env plugins: an installed package's `harness_r1.envs` entry point adds an env by name, and a
plugin that cannot serve is refused saying what is wrong.

The plugins here are installed for real: a package and its `.dist-info` (METADATA and
entry_points.txt) on the import path, found by `importlib.metadata` as pip's would be."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.cli.settings import use_root_config
from harness_r1.envs import BUILTIN_ENVS, EnvError, env_names, get_suite, plugin_entry_points

PLUGIN_SOURCE = """
from dataclasses import replace
from harness_r1.envs import get_suite

_DB = get_suite("dbbench")


class RenamedEnv:
    \"\"\"DBBench's env under the plugin's name: an env of another package, for the test.\"\"\"

    name = "sqlplugin"

    def __init__(self, env):
        self._env = env

    def reset(self, task, *, seed=None):
        return self._env.reset(task.model_copy(update={"env": "dbbench"}), seed=seed)

    def step(self, action):
        return self._env.step(action)

    def close(self):
        self._env.close()


def load_tasks(root, split):
    return [t.model_copy(update={"env": "sqlplugin"}) for t in _DB.load_tasks(root, split)]


def make_env(root):
    return RenamedEnv(_DB.make_env(root))


SUITE = replace(_DB, name="sqlplugin", load_tasks=load_tasks, make_env=make_env)
MISNAMED = replace(_DB, name="something_else")
NOT_A_SUITE = {"name": "sqlplugin"}
UNLABELLED = replace(_DB, name="sqlplugin")
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


def test_the_builtin_envs_come_first_then_the_installed_plugins(site: Path) -> None:
    """Whatever else this environment has installed (e.g. examples/textworld_env)."""
    assert BUILTIN_ENVS == ("alfworld", "dbbench", "webshop")
    assert env_names() == (*BUILTIN_ENVS, *plugin_entry_points())


def test_an_installed_plugin_is_found_by_name_and_serves_its_suite(site: Path) -> None:
    install(site, {"sqlplugin": "envplugin:SUITE"})
    assert "sqlplugin" in env_names() and env_names()[:3] == BUILTIN_ENVS
    suite = get_suite("sqlplugin")
    assert suite.name == "sqlplugin" and suite.splits == get_suite("dbbench").splits


def test_a_plugin_cannot_take_a_builtin_name(site: Path) -> None:
    install(site, {"dbbench": "envplugin:MISNAMED"})
    assert env_names().count("dbbench") == 1
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


# -- the commands ----------------------------------------------------------------------------


def test_env_list_names_builtins_and_plugins_with_their_package(site: Path) -> None:
    install(site, {"sqlplugin": "envplugin:SUITE"})
    result = CliRunner().invoke(app, ["env", "list"])
    assert result.exit_code == 0, result.output
    assert "dbbench\tbuilt in" in result.output
    assert "sqlplugin\tplugin: envplugin 0.1 (envplugin:SUITE)" in result.output


def test_env_check_passes_a_plugin_that_keeps_the_contract(site: Path) -> None:
    install(site, {"sqlplugin": "envplugin:SUITE"})
    use_root_config(None)
    result = CliRunner().invoke(app, ["env", "check", "sqlplugin", "--split", "dev"])
    assert result.exit_code == 0, result.output
    assert "sqlplugin: split dev:" in result.output and result.output.endswith("sqlplugin: ok\n")


def test_env_check_refuses_a_suite_whose_tasks_are_another_envs(site: Path) -> None:
    """DBBench's suite renamed but not its tasks: the check catches what a canary would trip
    on later."""
    install(site, {"sqlplugin": "envplugin:UNLABELLED"})
    use_root_config(None)
    result = CliRunner().invoke(app, ["env", "check", "sqlplugin", "--split", "dev"])
    assert result.exit_code == 1
    assert "ConformanceError: split 'dev' holds another env's task" in result.stderr


def test_env_check_names_what_is_wrong_and_exits_1(site: Path) -> None:
    install(site, {"sqlplugin": "envplugin:NOT_A_SUITE"})
    result = CliRunner().invoke(app, ["env", "check", "sqlplugin"])
    assert result.exit_code == 1
    assert "sqlplugin: EnvError: env plugin 'sqlplugin'" in result.stderr
    assert "is a dict, not an EnvSuite" in result.stderr
    unknown = CliRunner().invoke(app, ["env", "check", "nethack"])
    assert unknown.exit_code == 2 and "unknown env 'nethack'" in unknown.output


def test_data_fetch_says_a_plugin_brings_its_own_data(site: Path) -> None:
    from harness_r1.envs import fetch_env_data

    install(site, {"sqlplugin": "envplugin:SUITE"})
    with pytest.raises(KeyError, match="'sqlplugin' is a plugin env: its package brings"):
        fetch_env_data("sqlplugin", site / "data")
    with pytest.raises(KeyError, match="unknown env 'nethack'"):
        fetch_env_data("nethack", site / "data")
