"""Consumers: turning trajectories into work. Today: the deterministic failure-packet
extractor (packets.py, signals.py, constraints.py); the Kafka consumers/producers and batching
come with the daemon (issue 6)."""
