"""A package's public names, loaded on first use.

A package states what others may use in its `__init__`, as imports under `if TYPE_CHECKING:`
(what type checkers and readers see) and `__all__`; `lazy_exports` turns those imports into the
package's `__getattr__`, so `from harness_r1.deploy import GuardConfig` loads `deploy.guard`
alone, not the registry, the publisher and SQLAlchemy with it. Why: the CLI reads its settings
through half the packages (`config show` must not build the service), and eager re-exports
made each package cost what all its modules cost. One declaration per name: the map is read
from the `__init__`'s own source, so a name exported is a name imported there, nothing more.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def declared_exports(package: str, init_file: str) -> dict[str, tuple[str, str]]:
    """Exported name -> (module, name there) of every `from <package>.<module> import NAME`
    under the `__init__`'s `if TYPE_CHECKING:` block."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    names: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom) or statement.module is None:
                continue
            if statement.module.startswith(package + "."):
                for alias in statement.names:
                    names[alias.asname or alias.name] = (statement.module, alias.name)
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def lazy_exports(package: str, init_file: str) -> Callable[[str], Any]:
    """The package's module `__getattr__` (PEP 562): a declared name is imported from its
    module on first use and cached on the package; any other name is an AttributeError."""
    exports = declared_exports(package, init_file)
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, original = source
        value = getattr(importlib.import_module(module), original)
        namespace[name] = value
        return value

    return __getattr__
