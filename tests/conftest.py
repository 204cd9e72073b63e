"""Shared fixtures. `kafka_broker`: one embedded tansu broker (a real Kafka-protocol broker,
see harness_r1/consumers/broker.py) for the whole session, started only by tests that ask for it;
tests keep apart by using their own topic names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness_r1.consumers.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker()
    try:
        yield broker
    finally:
        broker.close()
