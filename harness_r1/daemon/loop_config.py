"""The improvement loop's plain config: its settings as read, and what it takes from other groups.

The loop's settings are declared once, on the settings group `LoopOptions` (defaults, bounds,
descriptions), and reach the loop as that object (`options`); this config adds what the loop
gets from elsewhere: the gate (the loop's gate fields with the gate group's attribution
limits), the live guard's config and the packet extractor's. Kept apart from `loop.py` so a
reader of the settings need not import the loop's store, sandbox and trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness_r1.consumers import PacketConfig
from harness_r1.daemon.settings import LoopOptions
from harness_r1.deploy import GuardConfig
from harness_r1.sandbox import GateConfig


@dataclass(frozen=True)
class LoopConfig:
    options: LoopOptions = field(default_factory=LoopOptions)
    max_attempts: int = 3
    gate: GateConfig = field(default_factory=GateConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    packet: PacketConfig = field(default_factory=PacketConfig)
