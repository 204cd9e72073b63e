"""Public names loaded on first use: declared once, under TYPE_CHECKING, resolved on demand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness_r1.exports import declared_exports


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A throwaway package `lazypkg` whose `__init__` exports two names of a module that
    counts its own loads."""
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "heavy.py").write_text("import builtins\nbuiltins.HEAVY_LOADS += 1\nVALUE = 7\n")
    (root / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from harness_r1.exports import lazy_exports\n"
        "if TYPE_CHECKING:\n"
        "    from lazypkg.heavy import VALUE\n"
        "    from lazypkg.heavy import VALUE as RENAMED\n"
        "__getattr__ = lazy_exports(__name__, __file__)\n"
        "__all__ = ['RENAMED', 'VALUE']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.HEAVY_LOADS", 0, raising=False)
    yield "lazypkg"
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]


def test_a_declared_name_loads_its_module_on_first_use_only(package: str) -> None:
    import builtins
    import importlib

    module = importlib.import_module(package)
    assert builtins.HEAVY_LOADS == 0 and f"{package}.heavy" not in sys.modules
    assert module.VALUE == 7 and module.RENAMED == 7
    from lazypkg import VALUE  # type: ignore[import-not-found]

    assert VALUE == 7 and builtins.HEAVY_LOADS == 1
    assert "VALUE" in vars(module)  # cached: the next use asks no __getattr__


def test_an_undeclared_name_is_an_attribute_error(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="has no attribute 'NOPE'"):
        _ = module.NOPE
    with pytest.raises(ImportError):
        exec("from lazypkg import NOPE", {})


def test_the_declarations_are_read_from_the_init_source(package: str, tmp_path: Path) -> None:
    declared = declared_exports(package, str(tmp_path / package / "__init__.py"))
    assert declared == {"VALUE": ("lazypkg.heavy", "VALUE"), "RENAMED": ("lazypkg.heavy", "VALUE")}
