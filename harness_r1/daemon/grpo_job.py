"""The scheduled GRPO update: stored candidate groups -> one new engineer version.

Runs when at least `min_groups` groups wait untrained (or on the configured cron). Only groups
the engineer sampled with exact token ids are replayable (TRL trains on those ids); groups
from the template teacher carry texts only and stay for SFT, counted as skipped. The new
version starts from the latest one (its adapter), is written as `engineer/vNNNN/` and never
overwrites an older version; the groups it used are marked trained with its version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from harness_r1.daemon.store import StateStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class GrpoJobConfig:
    output_root: Path
    min_groups: int = 8
    num_generations: int = 4
    base: str = "smollm2"
    cache_dir: Path | None = None
    threads: int | None = None


@dataclass(frozen=True)
class GrpoJobResult:
    trained: int
    skipped: int
    version: str | None


def grpo_update(store: StateStore, config: GrpoJobConfig) -> GrpoJobResult:
    from harness_r1.trainer import GrpoSettings, ReplayGroup, latest_version, train_grpo_replay

    rows = store.untrained_groups()
    replay, skipped = [], 0
    for row in rows:
        stored = json.loads(row.prompt)
        group = stored.get("replay") if isinstance(stored, dict) else None
        if group is None or len(group.get("completion_ids", ())) != config.num_generations:
            skipped += 1
            continue
        replay.append(ReplayGroup.from_dict(group))
    if len(replay) < config.min_groups:
        log.info("grpo_waiting", replayable=len(replay), needed=config.min_groups, skipped=skipped)
        return GrpoJobResult(0, skipped, None)
    parent = latest_version(config.output_root)
    settings = GrpoSettings(
        output_root=config.output_root,
        num_generations=config.num_generations,
        max_steps=0,  # one pass over the groups
        threads=config.threads,
    )
    result = train_grpo_replay(
        replay, config.base, settings, adapter=parent, cache_dir=config.cache_dir
    )
    store.mark_trained([g.group_id for g in replay], result.version)
    log.info("grpo_updated", version=result.version, groups=len(replay))
    return GrpoJobResult(len(replay), skipped, result.version)


class EngineerVersions:
    """Which published engineer version this daemon proposes with, kept up to the newest on
    disk. The GRPO update is a singleton job (one daemon of those sharing a state store trains
    it); every daemon sharing the artifacts directory loads the new version at its next check
    (`refresh`, a job each daemon runs), not only the one that trained it. `reload(version)`
    swaps it into the loop and returns the engineer's name, or None when it could not."""

    def __init__(self, root: Path, reload: Callable[[str], str | None], loaded: str | None) -> None:
        self.root = root
        self.reload = reload
        self.loaded = loaded

    def refresh(self) -> str | None:
        """Load the newest published version if it is not the one in use; its engineer's
        name, or None when nothing changed (or the load failed: it is tried again next time)."""
        from harness_r1.trainer import latest_version

        latest = latest_version(self.root)
        if latest is None or latest.name == self.loaded:
            return None
        return self.use(latest.name)

    def use(self, version: str) -> str | None:
        now = self.reload(version)
        if now is not None:
            self.loaded = version
            log.info("engineer_version_loaded", version=version, engineer=now)
        return now
