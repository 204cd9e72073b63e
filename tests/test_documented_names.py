"""Every name the README and the docs tell a user to import exists: a module they name is
there, and a class or function is one of its package's public names (a user copies
`harness_r1.deploy.OverlayClient`, not a module path)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    "README.md",
    "BENCHMARKS.md",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")),
    "ops/README.md",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").glob("*/README.md")),
]
#: `harness_r1.pkg.Name` in prose, or `from harness_r1.pkg import A, B` in an example (names in
#: parentheses may span lines, with comments)
DOTTED = re.compile(r"\bharness_r1(?:\.[a-z_][a-z0-9_]*)*\.[A-Za-z_][A-Za-z0-9_]*\b")
FROM_IMPORT = re.compile(
    r"from (harness_r1(?:\.[a-z_][a-z0-9_]*)*) import (\([^)]*\)|[A-Za-z0-9_, ]+)"
)


def imported(names: str) -> list[str]:
    """The names of an import's name list, comments and parentheses left out."""
    return [name for name in re.split(r"[,\s()]+", re.sub(r"#[^\n]*", "", names)) if name]


def documented_names() -> list[tuple[str, str, str]]:
    """(document, module, name) for each name a document tells a user to use."""
    found = set()
    for document in DOCUMENTS:
        text = (REPO / document).read_text(encoding="utf-8")
        for dotted in DOTTED.findall(text):
            module, _, name = dotted.rpartition(".")
            found.add((document, module, name))
        for module, names in FROM_IMPORT.findall(text):
            for name in imported(names):
                found.add((document, module, name))
    return sorted(found)


def test_the_documents_name_something() -> None:
    found = documented_names()
    assert ("README.md", "harness_r1.deploy", "OverlayClient") in found
    # the embedding guide's imports, each from the one place an embedding imports from
    embedding = {name for doc, module, name in found if doc == "docs/embedding.md"}
    assert {"build_agent", "callable_policy", "openai_policy", "Agent"} <= embedding


def test_a_multi_line_import_is_read_name_by_name() -> None:
    text = "from harness_r1.agent import (\n    build_agent,  # says why\n    Agent,\n)\nx = 1"
    ((module, names),) = FROM_IMPORT.findall(text)
    assert module == "harness_r1.agent"
    assert imported(names) == ["build_agent", "Agent"]


@pytest.mark.parametrize(("document", "module", "name"), documented_names())
def test_a_documented_name_imports_from_a_package(document: str, module: str, name: str) -> None:
    try:
        importlib.import_module(f"{module}.{name}")
        return  # a module or package the document names: it exists
    except ImportError:
        pass
    package = importlib.import_module(module)
    assert hasattr(package, "__path__"), f"{document}: {module} is a module, not a package"
    assert hasattr(package, name), f"{document}: {module} has no public name {name}"
