"""Ingest progress as the daemon sees it: lag, stuck partitions, and the sink it reports to.

`LogEnds` keeps the end of each partition's log as best known (for the lag gauge),
`PartitionProgress` names the partitions behind their end without moving (what /readyz says),
and `IngestSink` is what the daemon reports about ingestion (the wiring adapts it onto
DaemonMetrics).

A module of its own: this is the bookkeeping of what ingest has reached, plain state with no
thread, broker or store of its own, testable on numbers alone; the daemon's ingest thread
feeds it.
"""

from __future__ import annotations

from harness_r1.daemon.ingest import PollReport


class IngestSink:
    """What the daemon reports about ingestion (adapted onto DaemonMetrics)."""

    def polled(self, report: PollReport) -> None: ...
    def store_error(self) -> None: ...
    def lag(self, lag: dict[str, int]) -> None: ...  # by "topic:partition"
    def committed(self, at: float) -> None: ...
    def queue_depth(self, pending: int, running: int) -> None: ...
    def broker_error(self, op: str) -> None: ...
    def broker_reachable(self, up: bool) -> None: ...
    def partitions_held(self, held: dict[str, str]) -> None: ...  # "topic:partition" -> why


class PartitionProgress:
    """Which partitions are behind their end without moving: what /readyz names."""

    def __init__(self, stuck_after_s: float) -> None:
        self.stuck_after_s = stuck_after_s
        self._since: dict[str, tuple[int, float]] = {}  # key -> (position, since when)
        self._lag: dict[str, int] = {}

    def observe(self, positions: dict[str, int], lag: dict[str, int], now: float) -> None:
        self._lag = dict(lag)
        for key in lag:
            position = positions.get(key, 0)
            seen = self._since.get(key)
            if seen is None or seen[0] != position:
                self._since[key] = (position, now)

    def stuck(self, now: float) -> list[str]:
        lines = []
        for key, behind in sorted(self._lag.items()):
            position, since = self._since.get(key, (0, now))
            if behind > 0 and now - since >= self.stuck_after_s:
                lines.append(
                    f"partition {key} stuck at offset {position}, {behind} records behind, "
                    f"no progress for {now - since:.0f} s"
                )
        return lines


class LogEnds:
    """The end of each partition's log as best known, for the lag gauge.

    Why remember: a reader reopened after a store failure knows only the broker's ListOffsets
    answer until its first fetch, and tansu answers that with the base offset of the last
    record batch (see BroadcastReader.end_offsets). Ingest stuck on the store reopens its
    reader after every failed batch, so lag read from the reader alone reported the end as
    of a batch ago: 15 records waiting where 50 were, exactly while lag matters most. So an
    end known only from ListOffsets never lowers what was seen; an end from a fetch response
    is exact and replaces it, lower or not (a broker on `memory://` comes back empty after a
    restart: its log starts again from 0)."""

    def __init__(self) -> None:
        self._ends: dict[str, int] = {}

    def lag(
        self, ends: dict[str, int], exact: dict[str, int], positions: dict[str, int]
    ) -> dict[str, int]:
        """Records behind per "topic:partition" in `ends` (what the broker answered now),
        `exact` the ends the reader's fetches reported, `positions` its next offsets (absent:
        from 0)."""
        for key, end in ends.items():  # `ends` already holds the fetched end where known
            self._ends[key] = end if key in exact else max(self._ends.get(key, 0), end)
        return {key: max(0, self._ends[key] - positions.get(key, 0)) for key in ends}
