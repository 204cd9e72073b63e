"""The demo's tests use the daemon tests' named stand-ins (tests/daemon/daemon_rig.py): put
that folder on sys.path, as pytest does for the daemon's own tests."""

from __future__ import annotations

import sys
from pathlib import Path

RIG = Path(__file__).parents[1] / "daemon"

if str(RIG) not in sys.path:
    sys.path.insert(0, str(RIG))
