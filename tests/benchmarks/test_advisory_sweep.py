"""benchmarks/advisory_sweep.py: the patches it canaries are the library's advisory templates
for the env, each alone, and each one a file the canary command loads as that template."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from harness_r1.sandbox.patchfile import load_patch_file
from harness_r1.trainer.templates import TEMPLATES

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "advisory_sweep.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("advisory_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_sweep_takes_every_advisory_template_of_the_env_and_no_solver(
    tmp_path: Path,
) -> None:
    sweep = _script()
    names = sweep.advisory_names("webshop")
    assert "ws_options_check" in names and "progress_reminder" in names
    assert all(TEMPLATES[n].role == "advisory" for n in names)
    assert "ws_click_best" not in names  # a solver
    assert "db_sql_error_hint" not in sweep.advisory_names("webshop")  # another env's
    paths = sweep.write_patches("webshop", names, tmp_path)
    for name, path in zip(names, paths, strict=True):
        patch = load_patch_file(path, env="webshop")
        assert patch.description == name
        assert [h.hook for h in patch.hooks] == [TEMPLATES[name].hook]
