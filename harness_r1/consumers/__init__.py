"""Consumers: turning trajectories into work, and the Kafka plumbing for it. The deterministic
failure-packet extractor (packets.py, signals.py, constraints.py); the small Kafka helpers
(kafka.py: producer, topic setup, a broadcast reader over every partition with positions the
caller persists) and the embedded Kafka-protocol broker for demos and tests (broker.py)."""
