"""The example packages under examples/, installed for real (pip, no build isolation: the
venv's setuptools builds them) into a folder on the import path, as an operator would install
them beside harness-r1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def textworld_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """examples/textworld_env installed once per test run into a folder; its games generated into a
    shared cache (each game once for all tests). Yields the install folder, which is also on
    PYTHONPATH for the commands the tests start."""
    site = tmp_path_factory.mktemp("site")
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    install += ["--no-build-isolation", "--target", str(site), str(REPO / "examples/textworld_env")]
    subprocess.run(install, check=True, timeout=300)
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", "HARNESS_R1_TEXTWORLD_CACHE")}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), saved["PYTHONPATH"]]))
    os.environ["HARNESS_R1_TEXTWORLD_CACHE"] = str(tmp_path_factory.mktemp("textworld-games"))
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for name in [m for m in sys.modules if m.startswith("harness_r1_textworld")]:
            del sys.modules[name]
