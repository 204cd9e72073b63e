"""The import graph the README's Layout section promises: dependencies point one way."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import ModuleType

import harness_r1

ROOT = Path(harness_r1.__file__).parent

#: package -> the packages of ours it may import (top-level and lazy imports alike)
ALLOWED: dict[str, set[str]] = {
    "contracts": set(),
    "models": {"contracts"},
    "envs": {"contracts"},
    "consumers": {"contracts"},
    "harness": {"contracts", "models", "envs"},
    "sandbox": {"contracts", "models", "envs", "harness"},
    "trainer": {"contracts", "models", "envs", "harness", "sandbox", "consumers"},
    "deploy": {"contracts", "models", "harness", "consumers"},
    "daemon": {
        "contracts",
        "models",
        "envs",
        "harness",
        "sandbox",
        "trainer",
        "consumers",
        "deploy",
    },
    "agent": {
        "contracts",
        "models",
        "envs",
        "harness",
        "sandbox",
        "consumers",
        "deploy",
        "daemon",
    },
    "demo": {
        "contracts",
        "models",
        "envs",
        "harness",
        "sandbox",
        "trainer",
        "consumers",
        "deploy",
        "daemon",
        "agent",
    },
    "cli": {
        "contracts",
        "models",
        "envs",
        "harness",
        "sandbox",
        "trainer",
        "consumers",
        "deploy",
        "daemon",
        "agent",
        "demo",
    },
}

#: root modules every package may import: tools of the layout itself, not a layer
EVERYONES = {"exports"}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "harness_r1" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_package_imports_only_what_the_layout_allows() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ALLOWED), "a new package needs its line in the README and here"
    breaches = []
    for package in sorted(packages):
        for path in sorted((ROOT / package).rglob("*.py")):
            extra = imported_packages(path) - ALLOWED[package] - {package} - EVERYONES
            if extra:
                breaches.append(f"{path.relative_to(ROOT)} imports {sorted(extra)}")
    assert not breaches, "\n".join(breaches)


def test_module_prose_quotes_no_line_counts() -> None:
    """A module's size goes stale with the next edit: docstrings and comments say why a module
    is one module, never how many lines it has ("of 587 lines")."""
    import re

    stale = re.compile(r"\b(?:module|file) of [0-9][0-9,]* lines\b")
    quoting = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(ROOT.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if stale.search(line)
    ]
    assert quoting == [], quoting


def test_each_package_docstring_lists_its_modules() -> None:
    """A package's docstring names every module and subpackage it holds (its "Modules:"
    list), so a reader knows from it what is where, and a module added is a module listed."""
    missing = []
    for package in sorted(p for p in ROOT.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        listed = doc.split("\nModules:\n", 1)[-1] if "\nModules:\n" in doc else ""
        held = [f"{m.stem}.py" for m in package.glob("*.py") if m.stem != "__init__"]
        held += [f"{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()]
        missing += [f"{package.name}: {name}" for name in held if f"- {name}:" not in listed]
    assert missing == [], missing


def code_shape() -> ModuleType:
    """benchmarks/code_shape.py: the import graph as the before/after table measures it."""
    import importlib.util

    script = ROOT.parent / "benchmarks" / "code_shape.py"
    spec = importlib.util.spec_from_file_location("code_shape", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def import_graph() -> tuple[ModuleType, dict[str, set[str]], set[str]]:
    shape = code_shape()
    files = {
        str(path.relative_to(ROOT.parent)): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(ROOT.rglob("*.py"))
    }
    packages = {shape.module_name(p) for p in files if p.endswith("/__init__.py")}
    modules = {shape.module_name(p) for p in files}
    graph = {
        shape.module_name(path): set(shape.imported_modules(tree, packages, modules)) & modules
        for path, tree in files.items()
    }
    return shape, graph, packages


def test_no_modules_import_each_other() -> None:
    """No import circle, lazy imports included: a lazy import that hides a circle still ties
    the two modules' meanings together."""
    shape, graph, _ = import_graph()
    for module, targets in graph.items():
        targets.discard(module)
    assert shape.circles(graph) == []


def product_sources() -> dict[str, ast.Module]:
    """Every product and benchmark module, by path from the repository root."""
    repo = ROOT.parent
    paths = [
        *ROOT.rglob("*.py"),
        *(repo / "benchmarks").rglob("*.py"),
        *(repo / "ops").glob("*.py"),
    ]
    return {
        str(path.relative_to(repo)): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(paths)
    }


def test_imports_from_outside_a_package_go_through_its_public_names() -> None:
    """A package's `__init__` states what others may use; an import from outside the package
    names the package, never one of its modules (a lazy import no less)."""
    shape, _, packages = import_graph()
    modules = {shape.module_name(str(p.relative_to(ROOT.parent))) for p in ROOT.rglob("*.py")}
    reaching = [
        f"{path}: {target}"
        for path, tree in product_sources().items()
        for target in sorted(set(shape.imported_modules(tree, packages, modules)))
        if shape.into_internals(shape.module_name(path), target, packages)
    ]
    assert reaching == [], reaching


def test_every_public_name_of_every_package_resolves() -> None:
    """What `__all__` promises is there: each name imports (lazily exported ones included)."""
    import importlib

    missing = []
    for init in sorted(ROOT.rglob("__init__.py")):
        name = ".".join(init.parent.relative_to(ROOT.parent).parts)
        package = importlib.import_module(name)
        missing += [
            f"{name}.{n}" for n in getattr(package, "__all__", []) if not hasattr(package, n)
        ]
    assert missing == [], missing


def test_reading_the_settings_builds_no_service() -> None:
    """`config show` reads settings through half the packages: their public names load on
    first use, so neither the overlay registry, the daemon's wiring nor torch comes with them."""
    import subprocess

    probe = (
        "import sys, harness_r1.daemon.settings as s; s.Settings(); "
        "print(sorted(m for m in ('torch', 'harness_r1.deploy.registry', "
        "'harness_r1.daemon.wiring', 'harness_r1.trainer.grpo') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


#: the most modules over LONG_MODULE lines the package may hold (each says why it is one)
LONG_MODULE, MOST_LONG_MODULES = 500, 8


def test_few_modules_are_long_and_each_says_why() -> None:
    """A module a reader cannot hold in mind is the exception: at most MOST_LONG_MODULES of
    them, each with a "Why one module:" in its docstring."""
    long = {
        str(path.relative_to(ROOT)): path
        for path in sorted(ROOT.rglob("*.py"))
        if path.read_text(encoding="utf-8").count("\n") > LONG_MODULE
    }
    assert len(long) <= MOST_LONG_MODULES, sorted(long)
    unexplained = [
        name
        for name, path in long.items()
        if "Why one module:" not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    ]
    assert unexplained == [], unexplained
