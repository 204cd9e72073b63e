"""The service: settings, state store, ingest, the improvement loop, scheduler, observability,
the embedded demo.

Only `harness_r1.cli` imports this package.
"""
