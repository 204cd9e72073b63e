"""The agent-side client's durable state: what it runs, what it has accepted, where it reads.

Why on disk: an agent restarted while the broker is away must come back on the last good
overlay, and a replayed old release must stay refused after a restart (the seq high-water
marks). Writes are atomic (temp file, fsync, rename), so a crash leaves the old or the new
state, never half of one. Accepted envelopes are kept verbatim so the overlay in force can be
re-verified when it is loaded again.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness_r1.contracts import BASE_HARNESS

STATE_FILE = "client-state.json"


class Hold(StrEnum):
    """Why the client is not applying new releases."""

    NONE = "none"
    PAUSED = "paused"  # keep the current overlay
    PINNED = "pinned"  # keep the pinned overlay


class ClientState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: str
    target: str
    release_hwm: int = 0
    control_hwm: int = 0
    positions: dict[str, int] = Field(default_factory=dict)
    active: str = BASE_HARNESS
    history: list[str] = Field(
        default_factory=list, description="Overlays active before the current one, oldest first."
    )
    revoked: list[str] = Field(default_factory=list)
    hold: Hold = Hold.NONE
    pending: str | None = Field(
        default=None, description="Latest release accepted while held; applied on resume."
    )
    released: dict[str, float] = Field(
        default_factory=dict, description="Rollout fraction of the latest release per overlay."
    )


class ClientStateStore:
    """`state_dir/client-state.json` plus `state_dir/overlays/<id>.envelope.json`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.overlay_dir = state_dir / "overlays"
        self.overlay_dir.mkdir(parents=True, exist_ok=True)

    def load(self, agent_id: str, target: str) -> ClientState:
        path = self.state_dir / STATE_FILE
        if not path.exists():
            return ClientState(agent_id=agent_id, target=target)
        state = ClientState.model_validate_json(path.read_bytes())
        if state.target != target:
            raise ValueError(
                f"{path} belongs to target {state.target!r}, not {target!r}; use another "
                "state directory per agent pool"
            )
        return state

    def save(self, state: ClientState) -> None:
        _atomic_write(self.state_dir / STATE_FILE, state.model_dump_json(indent=1).encode())

    def save_envelope(self, overlay_id: str, data: bytes) -> None:
        _atomic_write(self._envelope_path(overlay_id), data)

    def load_envelope(self, overlay_id: str) -> bytes | None:
        path = self._envelope_path(overlay_id)
        return path.read_bytes() if path.exists() else None

    def _envelope_path(self, overlay_id: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in overlay_id)
        return self.overlay_dir / f"{safe}.envelope.json"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
