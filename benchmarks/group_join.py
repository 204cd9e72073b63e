"""How long a Kafka consumer-group join takes on the embedded broker (tansu), and a rebalance
when a second member joins: why the daemon uses manual assignment plus a store lock (one
ingesting daemon per group, a standby) instead of consumer groups.

    .venv/bin/python benchmarks/group_join.py
"""

from __future__ import annotations

import time

from kafka import KafkaConsumer

from harness_r1.consumers import EmbeddedBroker, KafkaSettings, ensure_topics

LIMIT_S = 120.0


def main() -> None:
    with EmbeddedBroker() as broker:
        ensure_topics(KafkaSettings(bootstrap=broker.bootstrap), ["join"], 4)
        began = time.monotonic()
        first = KafkaConsumer(
            "join", bootstrap_servers=broker.bootstrap, group_id="g", enable_auto_commit=False
        )
        while not first.assignment() and time.monotonic() - began < LIMIT_S:
            first.poll(timeout_ms=200)
        joined = time.monotonic() - began
        print(f"first member: {len(first.assignment())} partitions after {joined:.1f} s")
        began = time.monotonic()
        second = KafkaConsumer(
            "join", bootstrap_servers=broker.bootstrap, group_id="g", enable_auto_commit=False
        )
        while time.monotonic() - began < LIMIT_S:
            first.poll(timeout_ms=100)
            second.poll(timeout_ms=100)
            if second.assignment() and len(first.assignment()) + len(second.assignment()) == 4:
                break
        split = (len(first.assignment()), len(second.assignment()))
        print(f"second member: split {split} after {time.monotonic() - began:.1f} s")
        first.close()
        second.close()


if __name__ == "__main__":
    main()
