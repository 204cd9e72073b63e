"""Service wiring: settings and the CLI (later: state store, scheduler, metrics).

Nothing else in harness_r1 imports this package.
"""
