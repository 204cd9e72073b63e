"""The improvement loop's plain config: the one place its defaults live.

Kept apart from `loop.py` so the settings (and `config show`) can take their defaults from
here without importing the loop's store, sandbox and trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness_r1.consumers import PacketConfig
from harness_r1.deploy import GuardConfig
from harness_r1.sandbox import GateConfig


@dataclass(frozen=True)
class LoopConfig:
    batch_size: int = 8
    batch_window_s: float = 300.0
    k: int = 4
    max_pending_batches: int = 16
    guard_limit: int = 20
    rollout_fraction: float = 0.5
    release_target: str = "default"
    invalid_reward: float = 0.0
    graded_invalid: bool = False  # trainer.shaping: grade invalid rewards, charge hook faults
    max_attempts: int = 3
    lease_s: float = 600.0
    gate: GateConfig = field(default_factory=GateConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    packet: PacketConfig = field(default_factory=PacketConfig)
