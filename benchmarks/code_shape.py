"""The shape of the code at a git revision: what a newcomer meets before reading a line.

Measured from `git ls-tree`/`git show` alone (no checkout, nothing imported), so any two
commits compare in one run:

    python benchmarks/code_shape.py BEFORE AFTER   # a Markdown table, one column per commit
    python benchmarks/code_shape.py HEAD --json    # the same figures as JSON

What is counted, and why each figure matters:
- modules over 500 lines (product and benchmark Python, tests apart): a module a reader
  cannot hold in mind; the largest module;
- BENCHMARKS.md lines: the results page a user reads;
- imports into package internals: an import, top-level or lazy, from outside a package of
  `harness_r1` that names one of its modules rather than the package (its public API);
- import circles: groups of modules that import each other, lazy imports included;
- declarations per loop/gate/guard setting: the places a setting's name is declared (a
  class field or a CLI option's parameter), at most and in all;
- tracked tree: the bytes a clone checks out.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

#: the settings whose declarations are counted: the loop's, the gate's and the live guard's
SETTINGS = (
    "batch_size",
    "batch_window_s",
    "k",
    "max_pending_batches",
    "guard_limit",
    "rollout_fraction",
    "release_target",
    "invalid_reward",
    "graded_invalid",
    "min_batch_tasks",
    "min_guard_tasks",
    "alpha",
    "min_detectable_effect",
    "min_episodes",
    "max_episodes",
)
PRODUCT_ROOTS = ("harness_r1/", "benchmarks/", "deploy/", "ops/")
ROOT_PACKAGE = "harness_r1"


@dataclass(frozen=True)
class Shape:
    revision: str
    modules: int
    modules_over_500: int
    largest_module: str
    largest_lines: int
    benchmarks_md_lines: int
    imports_into_internals: int
    import_circles: int
    max_setting_declarations: int
    setting_declarations: int
    tracked_mb: float


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def tracked(revision: str) -> list[tuple[str, int]]:
    """(path, bytes) of every file the revision tracks."""
    rows = []
    for line in git("ls-tree", "-r", "-l", revision).splitlines():
        meta, path = line.split("\t", 1)
        size = meta.split()[3]
        rows.append((path, int(size) if size.isdigit() else 0))
    return rows


def show(revision: str, path: str) -> str:
    return git("show", f"{revision}:{path}")


def module_name(path: str) -> str:
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, packages: set[str], modules: set[str]) -> Iterator[str]:
    """Every module of ours an import names: `from pkg import mod` names pkg.mod where mod is
    a module, else pkg itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT_PACKAGE:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != ROOT_PACKAGE:
                continue
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                yield candidate if candidate in modules or candidate in packages else node.module


def owning_package(module: str, packages: set[str]) -> str:
    """The package a module belongs to (a package belongs to itself)."""
    return module if module in packages else module.rsplit(".", 1)[0]


def into_internals(importer: str, target: str, packages: set[str]) -> bool:
    """Whether `importer` reaches past a package's public face to name one of its modules."""
    if target in packages or target.count(".") < 2:
        return False
    package = owning_package(target, packages)
    return not (importer == package or importer.startswith(package + "."))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def declared_names(tree: ast.AST) -> Iterator[str]:
    """Class-level annotated fields and parameters with a default: where a setting is
    declared (a config field, a settings field, a CLI option)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    yield stmt.target.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            with_default = positional[len(positional) - len(args.defaults) :]
            keyword = [
                a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
            ]
            yield from (a.arg for a in [*with_default, *keyword])


def measure(revision: str) -> Shape:
    files = tracked(revision)
    python = [
        (path, size)
        for path, size in files
        if path.endswith(".py") and path.startswith(PRODUCT_ROOTS)
    ]
    sources = {path: show(revision, path) for path, _ in python}
    lines = {path: text.count("\n") for path, text in sources.items()}
    ours = [path for path in sources if path.startswith(ROOT_PACKAGE + "/")]
    packages = {module_name(p) for p in ours if p.endswith("/__init__.py")}
    modules = {module_name(p) for p in ours}
    graph: dict[str, set[str]] = {}
    internal = 0
    declarations = dict.fromkeys(SETTINGS, 0)
    for path, text in sources.items():
        tree = ast.parse(text)
        importer = module_name(path)
        targets = set(imported_modules(tree, packages, modules))
        internal += sum(into_internals(importer, t, packages) for t in targets)
        if path in ours:
            graph[importer] = {t for t in targets if t in modules and t != importer}
            for name in declared_names(tree):
                if name in declarations:
                    declarations[name] += 1
    largest = max(lines, key=lambda p: lines[p])
    benchmarks_md = next((show(revision, p) for p, _ in files if p == "BENCHMARKS.md"), "")
    return Shape(
        revision=git("rev-parse", "--short", revision).strip(),
        modules=len(sources),
        modules_over_500=sum(n > 500 for n in lines.values()),
        largest_module=largest,
        largest_lines=lines[largest],
        benchmarks_md_lines=benchmarks_md.count("\n"),
        imports_into_internals=internal,
        import_circles=len(circles(graph)),
        max_setting_declarations=max(declarations.values()),
        setting_declarations=sum(declarations.values()),
        tracked_mb=round(sum(size for _, size in files) / 1e6, 1),
    )


LABELS = {
    "modules": "Python modules (product and benchmarks)",
    "modules_over_500": "modules over 500 lines",
    "largest_module": "largest module",
    "largest_lines": "its lines",
    "benchmarks_md_lines": "BENCHMARKS.md lines",
    "imports_into_internals": "imports into package internals from outside",
    "import_circles": "import circles (lazy imports included)",
    "max_setting_declarations": "declarations of one loop/gate/guard setting, at most",
    "setting_declarations": f"declarations of the {len(SETTINGS)} loop/gate/guard settings",
    "tracked_mb": "tracked tree, MB",
}


def table(shapes: Iterable[Shape]) -> str:
    rows = [asdict(shape) for shape in shapes]
    header = "| measure | " + " | ".join(row["revision"] for row in rows) + " |"
    lines = [header, "|" + " --- |" * (len(rows) + 1)]
    for key, label in LABELS.items():
        lines.append(f"| {label} | " + " | ".join(str(row[key]) for row in rows) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="+", help="git revisions to measure")
    parser.add_argument("--json", action="store_true", help="JSON instead of a Markdown table")
    args = parser.parse_args(argv)
    shapes = [measure(revision) for revision in args.revisions]
    if args.json:
        print(json.dumps([asdict(shape) for shape in shapes], indent=2))
    else:
        print(table(shapes))


if __name__ == "__main__":
    main()
