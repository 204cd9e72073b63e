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
- declarations per loop/gate/guard setting: the places a setting is declared under any of
  its names (a field of a settings group, a domain config, a CLI job request, the demo's
  options, or a CLI command's option), at most and in all;
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

#: the loop's, the gate's and the live guard's settings, each with the names it goes by
SETTINGS: dict[str, tuple[str, ...]] = {
    "loop.batch_size": ("batch_size",),
    "loop.batch_window_s": ("batch_window_s",),
    "loop.k": ("k",),
    "loop.max_pending_batches": ("max_pending_batches",),
    "loop.guard_limit": ("guard_limit",),
    "loop.rollout_fraction": ("rollout_fraction",),
    "loop.release_target": ("release_target",),
    "loop.invalid_reward": ("invalid_reward",),
    "loop.graded_invalid": ("graded_invalid",),
    "loop.canary_lease_s": ("canary_lease_s", "lease_s"),
    "gate.min_batch": ("gate_min_batch", "min_batch_tasks", "min_batch"),
    "gate.min_guard": ("gate_min_guard", "min_guard_tasks", "min_guard"),
    "gate.alpha": ("gate_alpha", "alpha@Gate"),
    "guard.method": ("method@Guard",),
    "guard.alpha": ("alpha@Guard",),
    "guard.min_detectable_effect": ("min_detectable_effect",),
    "guard.min_episodes": ("min_episodes",),
    "guard.max_episodes": ("max_episodes@Guard",),
    "guard.promote_probability": ("promote_probability",),
    "guard.rollback_probability": ("rollback_probability",),
}
#: where such a setting can be declared: the fields of these classes (the settings groups, the
#: domain configs, the CLI's job requests and the demo's options) and the options of the CLI's
#: commands (parameters of functions in harness_r1/cli/, `alpha` counted as the gate's)
DECLARING_CLASSES = (
    "LoopOptions", "LoopConfig", "GateOptions", "GateConfig", "GuardOptions", "GuardConfig",
    "CanaryRequest", "DemoOptions",
)  # fmt: skip
#: CLI files whose options of a setting's name set another knob: `train sft`'s and `train
#: target`'s batch_size is the optimizer's batch, not the loop's failures per packet
OTHER_KNOBS = {("harness_r1/cli/train.py", "batch_size")}
#: product and benchmark Python (deploy/: the ops kit's name at older commits)
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


def declared_names(tree: ast.AST, cli: bool) -> Iterator[str]:
    """Where a default is stated: fields of the declaring classes given a value, as
    `name@Class`, and, in the CLI, command options whose default is not None (None: "the
    setting's"), as `name@cli`. A field without a value only carries the setting down."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in DECLARING_CLASSES:
            for stmt in node.body:
                valued = isinstance(stmt, ast.AnnAssign) and not _is_none(stmt.value)
                if valued and isinstance(stmt.target, ast.Name):  # type: ignore[union-attr]
                    yield f"{stmt.target.id}@{node.name}"  # type: ignore[union-attr]
        elif cli and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = [
                *zip(
                    positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
                ),
                *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d),
            ]
            yield from (f"{a.arg}@cli" for a, d in pairs if not _is_none(d))


def _is_none(node: ast.expr | None) -> bool:
    """No value, or None."""
    return node is None or (isinstance(node, ast.Constant) and node.value is None)


def setting_of(declared: str) -> str | None:
    """The setting a declaration `name@Where` declares, None when it is none of them."""
    name, where = declared.split("@", 1)
    if where == "cli" and name == "alpha":
        where = "Gate"
    for setting, aliases in SETTINGS.items():
        for alias in aliases:
            alias_name, _, scope = alias.partition("@")
            if alias_name == name and (not scope or where.startswith(scope)):
                return setting
    return None


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
            for declared in declared_names(tree, cli=path.startswith(ROOT_PACKAGE + "/cli/")):
                if (path, declared.split("@")[0]) in OTHER_KNOBS and declared.endswith("@cli"):
                    continue
                setting = setting_of(declared)
                if setting is not None:
                    declarations[setting] += 1
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
