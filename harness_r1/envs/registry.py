"""Which environments exist: the three built in, and every suite an installed package adds.

A package adds an env by declaring an entry point in the group `harness_r1.envs` whose name is
the env's name and whose object is its `EnvSuite` (in pyproject.toml:
`[project.entry-points."harness_r1.envs"] textworld = "my_pkg.suite:SUITE"`). Why entry
points: an operator's env lives in the operator's package, installed beside ours; nothing here
has to be edited or imported for it to be found (the mechanism Gymnasium and pytest use).

A plugin is loaded only when asked for by name, and one that cannot serve is refused with what
is wrong: its import fails, its object is no `EnvSuite`, or the suite's name is not the entry
point's. A plugin cannot take a built-in env's name.
"""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points

from harness_r1.envs.base import EnvError, EnvSuite

#: the environments shipped in this package, each a subpackage exposing `SUITE`
BUILTIN_ENVS: tuple[str, ...] = ("alfworld", "dbbench", "webshop")
ENTRY_POINT_GROUP = "harness_r1.envs"


def plugin_entry_points() -> dict[str, EntryPoint]:
    """The installed plugins' entry points, by env name (built-in names left out)."""
    found = entry_points(group=ENTRY_POINT_GROUP)
    return {
        ep.name: ep for ep in sorted(found, key=lambda ep: ep.name) if ep.name not in BUILTIN_ENVS
    }


def env_names() -> tuple[str, ...]:
    """Every env this installation can run: the built-in ones, then the plugins."""
    return (*BUILTIN_ENVS, *plugin_entry_points())


def get_suite(name: str) -> EnvSuite:
    """The suite of an env, built in or a plugin's. Raises KeyError for an unknown name (the
    known ones listed) and EnvError for a plugin that cannot serve (what is wrong named)."""
    if name in BUILTIN_ENVS:
        suite: EnvSuite = importlib.import_module(f"harness_r1.envs.{name}").SUITE
        return suite
    plugins = plugin_entry_points()
    if name not in plugins:
        raise KeyError(f"unknown env {name!r}; known: {', '.join((*BUILTIN_ENVS, *plugins))}")
    return _loaded(plugins[name])


def _loaded(entry: EntryPoint) -> EnvSuite:
    where = f"env plugin {entry.name!r} ({ENTRY_POINT_GROUP} entry point {entry.value!r})"
    try:
        suite = entry.load()
    except Exception as err:  # noqa: BLE001 - any import failure of someone else's package
        raise EnvError(f"{where} does not load: {type(err).__name__}: {err}") from err
    if not isinstance(suite, EnvSuite):
        raise EnvError(f"{where} is a {type(suite).__name__}, not an EnvSuite")
    if suite.name != entry.name:
        raise EnvError(f"{where} holds the suite {suite.name!r}: the names must agree")
    return suite
