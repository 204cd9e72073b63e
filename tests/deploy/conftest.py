"""Fixtures of the deploy tests; the helpers behind them live in deploy_rig.py."""

from deploy_rig import client_metrics, rig

__all__ = ["client_metrics", "rig"]
