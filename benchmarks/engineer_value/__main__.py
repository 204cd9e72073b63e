"""`python benchmarks/engineer_value ...` runs the experiment (`cli.main`), as does
`python -m benchmarks.engineer_value ...` from the repository root.

Run as a directory, this file is no package module (no relative import works), so the
directory's parent replaces it on the import path and the package is imported by its name:
every module then belongs to one package, `engineer_value`, and the run-wide settings
(`--target-policy`, `--grpo-steps`) exist once.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__:
    from .cli import main
else:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    from engineer_value.cli import main

main()
