"""The cold start's counts: what became of each packet's proposals (`PacketStats`) and of the
whole build (`ColdStartStats`, what `stats.json` holds), per env and in total.

Why a module of its own: the counts are a format of their own (`stats.json`, which the
benchmarks read back), summed the same way per packet, per env and in total, and they depend on
nothing the build runs; nothing in them depends on timing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ColdStartStats",
    "PacketStats",
]


@dataclass
class Tally:
    packets: int = 0
    proposals: int = 0
    kept: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    def add(self, other: Tally) -> None:
        self.packets += other.packets
        self.proposals += other.proposals
        self.kept += other.kept
        self.rejected.update(other.rejected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "packets": self.packets,
            "proposals": self.proposals,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "rejected_total": sum(self.rejected.values()),
        }


@dataclass
class PacketStats:
    """What became of one packet's proposals."""

    packet_id: str
    env: str
    tasks: int
    proposals: int = 0
    kept: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    baseline_success_rate: float | None = None
    kept_deltas: list[float] = field(default_factory=list)
    teacher_error: str | None = None

    def tally(self) -> Tally:
        return Tally(1, self.proposals, self.kept, Counter(self.rejected))

    def to_dict(self) -> dict[str, Any]:
        return {
            "packet_id": self.packet_id,
            "env": self.env,
            "tasks": self.tasks,
            "proposals": self.proposals,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "baseline_success_rate": self.baseline_success_rate,
            "kept_deltas": self.kept_deltas,
            "teacher_error": self.teacher_error,
        }


@dataclass
class ColdStartStats:
    """Counts of one cold-start build (what `stats.json` holds)."""

    teacher: str
    config: dict[str, Any]
    packets_available: int = 0
    total: Tally = field(default_factory=Tally)
    per_env: dict[str, Tally] = field(default_factory=dict)
    per_packet: list[PacketStats] = field(default_factory=list)
    kept_templates: Counter[str] = field(default_factory=Counter)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def packets(self) -> int:
        return self.total.packets

    @property
    def proposals(self) -> int:
        return self.total.proposals

    @property
    def kept(self) -> int:
        return self.total.kept

    @property
    def rejected(self) -> dict[str, int]:
        return dict(sorted(self.total.rejected.items()))

    def add(self, packet: PacketStats) -> None:
        self.per_packet.append(packet)
        tally = packet.tally()
        self.total.add(tally)
        self.per_env.setdefault(packet.env, Tally()).add(tally)

    def to_dict(self) -> dict[str, Any]:
        deltas = [d for p in self.per_packet for d in p.kept_deltas]
        improving = sum(1 for d in deltas if d > 0)
        return {
            "teacher": self.teacher,
            "config": self.config,
            "packets_available": self.packets_available,
            **self.total.to_dict(),
            "kept_rate": self.kept / self.proposals if self.proposals else None,
            "kept_mean_delta": sum(deltas) / len(deltas) if deltas else None,
            "kept_improving": improving,
            "per_env": {env: t.to_dict() for env, t in sorted(self.per_env.items())},
            "kept_templates": dict(sorted(self.kept_templates.items())),
            "teacher_errors": sum(1 for p in self.per_packet if p.teacher_error),
            "per_packet": [p.to_dict() for p in self.per_packet],
            "files": self.files,
        }
