"""Fixtures of the sandbox tests; the helpers behind them live in executor_rig.py (`actor`,
`actor_patch`), canary_rig.py (`door_env_reset`, `dancing_canary`) and attack_corpus_rig.py
(`host`)."""

from attack_corpus_rig import host
from canary_rig import dancing_canary, door_env_reset
from executor_rig import actor, actor_patch

__all__ = ["actor", "actor_patch", "dancing_canary", "door_env_reset", "host"]
