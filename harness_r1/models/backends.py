"""Which backend a model name means, for targets (`build_policy`) and engineers
(`trainer.engineer.build_engineer`) alike: one resolution and one error, so `--policy` and
`--backend` accept the same embedded names and checkpoint directories."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness_r1.models.local_models import EMBEDDED

Family = Literal["openai", "vllm", "embedded", "checkpoint"]


@dataclass(frozen=True)
class Backend:
    """`family`: a server (openai), in-process vLLM, an embedded model (`name` is its key in
    EMBEDDED) or a transformers checkpoint directory (`checkpoint`)."""

    family: Family
    name: str
    checkpoint: Path | None = None


def resolve_backend(kind: str, role: str, remote: tuple[Family, ...]) -> Backend:
    """`kind` as given on the command line; `remote`: the non-local families this role
    supports (a target: openai; an engineer: openai and vllm)."""
    if kind in remote:
        return Backend(kind, kind)
    if kind in EMBEDDED:
        return Backend("embedded", kind)
    checkpoint = Path(kind)
    if (checkpoint / "config.json").is_file():
        return Backend("checkpoint", checkpoint.name, checkpoint)
    others = ", ".join(repr(name) for name in remote)
    raise ValueError(
        f"unknown {role} {kind!r}; use one of {', '.join(EMBEDDED)}, {others} or a "
        "directory holding a transformers checkpoint (config.json)"
    )
