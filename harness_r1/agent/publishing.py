"""Where an embedded agent's trajectories go: the daemon's trajectory topic, one acknowledged
record per finished episode.

Why a class and not the producer alone: an agent serves its users first. A broker that is away
(at start or later) must not stop episodes, so a record that is not acknowledged is logged and
counted (`failed`), never raised into the episode loop, and the producer is built on first use
and built again after a failure, no more often than every `retry_s`. The trajectory itself is
still returned by `Agent.run`: an operator can send it later (`harness-r1 publish FILE.jsonl`).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import structlog

from harness_r1.contracts import Trajectory

if TYPE_CHECKING:
    from harness_r1.consumers import KafkaSettings

log = structlog.get_logger(__name__)


class TrajectoryPublisher:
    """A trajectory sink (`DeployedAgent`'s) that publishes to `topic`. A `producer` given is
    shared and left open by `close`; one built here is closed by it."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        producer: Any | None = None,
        retry_s: float = 30.0,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.retry_s = retry_s
        self.published = 0
        self.failed = 0
        self.last_error: str | None = None
        self._producer = producer
        self._owned = producer is None
        self._next_try = 0.0
        self._lock = threading.Lock()

    def __call__(self, trajectory: Trajectory) -> None:
        from harness_r1.consumers import KafkaUnavailableError, PublishError, publish

        with self._lock:
            try:
                producer = self._ready()
                if producer is None:
                    raise KafkaUnavailableError(self.last_error or "no producer yet")
                publish(
                    producer,
                    self.topic,
                    trajectory.to_json_bytes(),
                    timeout_s=self.kafka.send_timeout_s,
                )
            except (PublishError, KafkaUnavailableError) as err:
                self.failed += 1
                self.last_error = str(err)
                log.warning(
                    "trajectory_not_published",
                    trajectory_id=trajectory.trajectory_id,
                    topic=self.topic,
                    error=str(err),
                )
                return
            self.published += 1

    def _ready(self) -> Any | None:
        """The producer, built now if there is none and the last try is `retry_s` old."""
        if self._producer is not None:
            return self._producer
        if time.monotonic() < self._next_try:
            return None
        from harness_r1.consumers import KafkaUnavailableError, make_producer

        try:
            self._producer = make_producer(self.kafka)
        except KafkaUnavailableError as err:
            self._next_try = time.monotonic() + self.retry_s
            self.last_error = str(err)
            raise
        return self._producer

    def close(self) -> None:
        with self._lock:
            if self._owned and self._producer is not None:
                self._producer.close(timeout=5)
            self._producer = None
