"""`build_agent`: the one place a deployed agent is assembled from settings, a policy and an env.

What it wires (each part documented where it lives): the env's suite by name (built in or an
installed plugin, `envs.get_suite`); the operator's policy (`agent/policies.py`); the harness
runtime with the same episode settings the daemon's canary uses (`loop.max_steps`,
`loop.history_turns`, `sandbox.episode_hook_budget_s`), so what the canary measured is what the
agent runs; the overlay client (`deploy/client.py`) reading every partition of the release and
control topics, verifying each message against the trusted public keys, keeping its state on
disk; hooks of every overlay in the isolated worker (`sandbox.IsolatedHooks`, the canary's
sandbox settings); and a publisher to the trajectory topic (`agent/publishing.py`).

Why here and not in the daemon: the demo's fleet and an operator's own process build agents
the same way, so a rule changed here (a topic, a key, an episode setting) changes for both.
Settings are read once, here at the edge (a path is read with `load_settings`), then passed
down as plain objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness_r1.agent.embedded import Agent
from harness_r1.agent.policies import PolicyLike, as_policy
from harness_r1.agent.publishing import TrajectoryPublisher
from harness_r1.contracts import Patch, Trajectory
from harness_r1.deploy import Keyring
from harness_r1.harness import HookSet

if TYPE_CHECKING:
    from harness_r1.consumers import KafkaSettings
    from harness_r1.daemon.settings import Settings
    from harness_r1.deploy import ClientMetrics, MessageSource

#: Kafka client id of embedded agents (the brokers' logs and quotas tell them from the daemon)
AGENT_CLIENT_ID = "harness-r1-agent"


# Why this size: every knob an operator may set on an agent, as keywords with defaults
def build_agent(
    settings: Settings | Path | str,
    policy: PolicyLike,
    env: str,
    *,
    agent_id: str,
    target: str | None = None,
    keys: Keyring | Path | str | None = None,
    state_dir: Path | str | None = None,
    lockstep: int = 1,
    max_steps: int | None = None,
    history_turns: int | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
    producer: Any | None = None,
    client_metrics: ClientMetrics | None = None,
    sync_interval_ms: int = 100,
) -> Agent:
    """A started deployed agent (its client reads releases in the background); close it, or
    use it as a context manager.

    settings: a `Settings` object, or the path of a settings file (YAML, the daemon's format;
      `HARNESS_R1_*` variables still win). It must name `kafka_bootstrap`; the topic names,
      `keys_dir`, the data root, `sandbox` and the episode settings of `loop` are read too.
    policy: a `harness_r1.models.Policy`, or a function `messages -> reply` (wrapped by
      `callable_policy`; a model id of your own: call `callable_policy` yourself).
    env: an env name (`harness-r1 env list`: the built-in ones and installed plugins).
    agent_id: this agent's name in trajectories, cohorts and the live guard (unique per pool).
    target: the agent pool it takes releases for (default `loop.release_target`: the pool the
      daemon releases to).
    keys: the trusted public keys releases are verified with: a Keyring or a directory of
      `<key_id>.pub` (default the settings' `keys_dir`).
    state_dir: where the client keeps the overlay in force, its high-water marks and reading
      positions across restarts (default `<cache>/agents/<target>/<agent_id>`).
    lockstep: episodes played together, one model call per decision round for all of them.
    max_steps, history_turns: episode settings (default the settings' `loop` values, the
      canary's).
    on_trajectory: called with each trajectory after it was published.
    producer: a Kafka producer shared with other agents (left open at close); by default the
      agent builds its own on first use.
    client_metrics: the overlay client's counters (`harness_r1.deploy.ClientMetrics` on your
      Prometheus registry; one for all the agents of a process): messages read, refusals and
      swaps (docs/metrics.md).
    sync_interval_ms: how long the client's background reader waits for a message per poll.
    """
    from harness_r1.deploy import ClientConfig, DeployedAgent, OverlayClient
    from harness_r1.envs import get_suite
    from harness_r1.harness import HarnessRuntime, RunConfig

    # everything that can be refused is checked before anything connects to the brokers
    config = _settings(settings)
    suite = get_suite(env)  # KeyError naming the known envs, plugins included
    target_policy = as_policy(policy)
    data_root = _data_root(config)
    kafka = _kafka(config)
    keyring = _keyring(keys, config)
    run = RunConfig(
        agent_id=agent_id,
        max_steps=max_steps if max_steps is not None else config.loop.max_steps,
        history_turns=history_turns if history_turns is not None else config.loop.history_turns,
        lockstep=lockstep,
        hook_budget_s=config.sandbox.episode_hook_budget_s,
    )
    pool = target or config.loop.release_target
    client = OverlayClient(
        ClientConfig(
            agent_id=agent_id,
            target=pool,
            state_dir=Path(state_dir) if state_dir else config.cache / "agents" / pool / agent_id,
            release_topic=config.release_topic,
            control_topic=config.control_topic,
        ),
        keyring,
        _isolated_hooks(config),
        source_factory=_reader(kafka, [config.release_topic, config.control_topic]),
        metrics=client_metrics,
    )
    runtime = HarnessRuntime(suite, target_policy, data_root, run)
    publisher = TrajectoryPublisher(kafka, config.trajectory_topic, producer)

    def sink(trajectory: Trajectory) -> None:
        publisher(trajectory)
        if on_trajectory is not None:
            on_trajectory(trajectory)

    client.start(interval_ms=sync_interval_ms)
    return Agent(DeployedAgent(runtime, client, sink), suite, data_root, publisher)


def _settings(settings: Settings | Path | str) -> Settings:
    from harness_r1.daemon.settings import Settings, load_settings

    if isinstance(settings, Settings):
        return settings
    return load_settings(Path(settings))


def _data_root(settings: Settings) -> Path:
    """The settings' data root, or the default one; an error, not an exit, when there is none
    (the agent is embedded in someone else's process)."""
    from harness_r1.envs import default_data_root

    root = settings.data or default_data_root()
    if root is None:
        raise ValueError(
            "no benchmark data found: set `data` in the settings (HARNESS_R1_DATA) to a data "
            "root, or run `harness-r1 data fetch ENV`"
        )
    return root


def _kafka(settings: Settings) -> KafkaSettings:
    """The daemon's Kafka client settings (security included) under the agents' client id."""
    if not settings.kafka_bootstrap:
        raise ValueError(
            "no Kafka brokers configured: set `kafka_bootstrap` in the settings "
            "(HARNESS_R1_KAFKA_BOOTSTRAP=host:port), the brokers the daemon reads"
        )
    return settings.kafka_client(AGENT_CLIENT_ID)


def _keyring(keys: Keyring | Path | str | None, settings: Settings) -> Keyring:
    if isinstance(keys, Keyring):
        return keys
    directory = Path(keys) if keys is not None else settings.keys_dir
    if directory is None:
        raise ValueError(
            "no trusted keys: set `keys_dir` in the settings (HARNESS_R1_KEYS_DIR) to the "
            "directory of the public keys releases are signed with (<key_id>.pub, from "
            "`harness-r1 keys generate`), or pass keys="
        )
    return Keyring.from_directory(directory)  # ValueError when it holds no key


def _isolated_hooks(settings: Settings) -> Callable[[Patch, str], HookSet]:
    """Every overlay's hooks in the isolated worker, under the canary's sandbox settings: a
    patch is as hostile in production as in the canary."""
    from harness_r1.sandbox import IsolatedHooks

    sandbox = settings.sandbox.sandbox_config()

    def hooks(patch: Patch, overlay_id: str) -> HookSet:
        return IsolatedHooks(patch, sandbox, overlay_id=overlay_id)

    return hooks


def _reader(
    kafka: KafkaSettings, topics: list[str]
) -> Callable[[Mapping[str, int]], MessageSource]:
    """The client's reader: every partition of the release and control topics, from the
    positions it stored (broadcast: no consumer group)."""
    from harness_r1.consumers import BroadcastReader

    def source(positions: Mapping[str, int]) -> MessageSource:
        return BroadcastReader(kafka, topics, positions)

    return source
