"""What `make test` could not run here, said at the end of the run: the tests skipped for a
tool this machine lacks, by tool, and the one command that installs them (`make test-deps`).

A skip's reason names its tool the way the tests write it: "(Debian package NAME)" or
"apt-get install NAME"; other skips (an optional backend, a GPU) are left to pytest's own
summary."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_NAME = r"([a-z0-9][a-z0-9.+-]*)"
_PACKAGE = re.compile(rf"Debian package {_NAME}|apt-get install {_NAME}")


def missing_packages(reasons: Iterable[str]) -> Counter[str]:
    """Debian packages named by skip reasons, with how many skips named each."""
    found: Counter[str] = Counter()
    for reason in reasons:
        for match in _PACKAGE.finditer(reason):
            found[match.group(1) or match.group(2)] += 1
    return found


def summary(found: Counter[str]) -> list[str]:
    """The lines to print; none when nothing was skipped for a missing tool."""
    if not found:
        return []
    tools = ", ".join(f"{name} ({count})" for name, count in sorted(found.items()))
    return [
        f"{sum(found.values())} tests skipped for tools this machine lacks: {tools}.",
        "Install them and run again: `make test-deps` (sudo apt-get install -y "
        f"--no-install-recommends {' '.join(sorted(found))}), then `make test`.",
    ]
