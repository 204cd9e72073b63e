"""Fixtures of the deploy tests; the helpers behind them live in deploy_rig.py."""

from deploy_rig import agent_config, client, client_metrics, rig

__all__ = ["agent_config", "client", "client_metrics", "rig"]
