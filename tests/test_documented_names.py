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
]
#: `harness_r1.pkg.Name` in prose, or `from harness_r1.pkg import A, B` in an example
DOTTED = re.compile(r"\bharness_r1(?:\.[a-z_][a-z0-9_]*)*\.[A-Za-z_][A-Za-z0-9_]*\b")
FROM_IMPORT = re.compile(r"from (harness_r1(?:\.[a-z_][a-z0-9_]*)*) import ([A-Za-z_, ()]+)")


def documented_names() -> list[tuple[str, str, str]]:
    """(document, module, name) for each name a document tells a user to use."""
    found = set()
    for document in DOCUMENTS:
        text = (REPO / document).read_text(encoding="utf-8")
        for dotted in DOTTED.findall(text):
            module, _, name = dotted.rpartition(".")
            found.add((document, module, name))
        for module, names in FROM_IMPORT.findall(text):
            for name in re.split(r"[,\s()]+", names):
                if name:
                    found.add((document, module, name))
    return sorted(found)


def test_the_documents_name_something() -> None:
    assert ("README.md", "harness_r1.deploy", "OverlayClient") in documented_names()


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
