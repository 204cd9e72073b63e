"""`build_agent` on the embedded broker (harness_r1.agent): what it refuses at build time, what
a misbehaving policy costs (the `run` under way, nothing more), and that a broker out of reach
costs the trajectories' publication, never the episodes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from harness_r1.agent import Agent, ChatMessage, PolicyError, build_agent, callable_policy
from harness_r1.consumers import BroadcastReader, EmbeddedBroker
from harness_r1.contracts import Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.deploy import generate_keypair

ENV, SPLIT = "webshop", "fixed_heldout"
MAX_STEPS = 2


def settings_for(tmp_path: Path, bootstrap: str, **changes: object) -> Settings:
    """Fresh topics, a trusted key, state under tmp_path."""
    keys = tmp_path / "keys"
    if not keys.is_dir():
        generate_keypair(keys, "ops-1")
    run = uuid.uuid4().hex[:8]
    fields: dict[str, object] = {
        "cache": tmp_path / "cache",
        "kafka_bootstrap": bootstrap,
        "trajectory_topic": f"traj-{run}",
        "release_topic": f"rel-{run}",
        "control_topic": f"ctl-{run}",
        "keys_dir": keys,
        "loop": {"release_target": "pool-a"},
        **changes,
    }
    return Settings(**fields)  # type: ignore[arg-type]


def buyer(messages: list[ChatMessage]) -> str:
    """Searches, then buys whatever page it is on: with MAX_STEPS, two calls an episode."""
    latest = messages[-1]["content"]
    return "Action: search[lotion]" if "search[<your query>]" in latest else "click[buy now]"


def published(settings: Settings, expected: int) -> list[Trajectory]:
    """The trajectories on the topic, read as the daemon reads them."""
    import time

    found: list[Trajectory] = []
    with BroadcastReader(settings.kafka_client(), [settings.trajectory_topic]) as reader:
        deadline = time.monotonic() + 20
        while len(found) < expected and time.monotonic() < deadline:
            found += [Trajectory.model_validate_json(r.value) for r in reader.poll(200)]
        found += [Trajectory.model_validate_json(r.value) for r in reader.poll(300)]
    return found


def test_an_agent_plays_publishes_and_names_its_pool(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    settings = settings_for(tmp_path, kafka_broker.bootstrap)
    seen: list[str] = []
    with build_agent(
        settings,
        buyer,
        ENV,
        agent_id="shop-1",
        max_steps=MAX_STEPS,
        on_trajectory=lambda t: seen.append(t.agent_id),
    ) as agent:
        assert isinstance(agent, Agent)
        assert (agent.agent_id, agent.target, agent.env) == ("shop-1", "pool-a", ENV)
        assert agent.active_overlay_id == "base"
        tasks = agent.tasks(SPLIT, limit=2)
        out = agent.run(tasks)  # bare tasks: each plays with its position as seed
        with pytest.raises(ValueError, match="is a dbbench task"):
            agent.run([tasks[0].model_copy(update={"env": "dbbench"})])
    assert [t.task.seed for t in out] == [0, 1] and seen == ["shop-1", "shop-1"]
    assert all(t.harness_version == "base" and t.target.model_id.endswith("buyer") for t in out)
    assert agent.publisher.published == 2 and agent.publisher.failed == 0
    on_topic = published(settings, 2)
    assert sorted(t.trajectory_id for t in on_topic) == sorted(t.trajectory_id for t in out)
    # the client's state lives under the cache, by pool and agent, across restarts
    assert (tmp_path / "cache" / "agents" / "pool-a" / "shop-1").is_dir()
    with pytest.raises(RuntimeError, match="closed"):
        agent.run(tasks)
    agent.close()  # idempotent


def test_a_failing_policy_ends_its_run_and_the_agent_plays_on(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    """The model failing mid-episode: that `run` raises PolicyError, the episode under way is
    never published (an outage is not the agent's failure), the episode finished before it
    was; the next `run` plays as if nothing happened."""
    settings = settings_for(tmp_path, kafka_broker.bootstrap)
    calls = {"n": 0}

    def flaky(messages: list[ChatMessage]) -> str:
        calls["n"] += 1
        if calls["n"] == 3:  # episode 1's first step: episode 0 took two calls
            raise ConnectionError("model server reset the connection")
        return buyer(messages)

    policy = callable_policy(flaky, model_id="flaky", version="1")
    with build_agent(settings, policy, ENV, agent_id="shop-2", max_steps=MAX_STEPS) as agent:
        tasks = agent.tasks(SPLIT, limit=3)
        with pytest.raises(PolicyError, match="ConnectionError: model server reset"):
            agent.run([(task, 7 + i) for i, task in enumerate(tasks)])
        assert agent.publisher.published == 1
        again = agent.run([(tasks[1], 8)])
    assert again[0].outcome.steps == 2 and again[0].task.seed == 8
    on_topic = published(settings, 2)
    assert sorted((t.task.task_id, t.task.seed) for t in on_topic) == sorted(
        [(tasks[0].task_id, 7), (tasks[1].task_id, 8)]
    )


def test_a_broker_out_of_reach_costs_publication_not_episodes(tmp_path: Path) -> None:
    from harness_r1.consumers.broker import free_port

    settings = settings_for(
        tmp_path,
        f"127.0.0.1:{free_port()}",  # nobody listens
        kafka={"request_timeout_ms": 500},
    )
    with build_agent(settings, buyer, ENV, agent_id="shop-3", max_steps=MAX_STEPS) as agent:
        out = agent.run(agent.tasks(SPLIT, limit=2))
    assert [t.outcome.steps for t in out] == [2, 2]
    assert agent.publisher.published == 0 and agent.publisher.failed == 2
    assert agent.publisher.last_error


def test_build_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    """Each refusal names what to set; none needs the broker (nothing connects before)."""
    settings = settings_for(tmp_path, "127.0.0.1:9")
    with pytest.raises(ValueError, match="no trusted keys: set `keys_dir`"):
        build_agent(settings.model_copy(update={"keys_dir": None}), buyer, ENV, agent_id="a")
    empty = tmp_path / "no-keys"
    empty.mkdir()
    with pytest.raises(ValueError, match="no \\*.pub keys"):
        build_agent(settings, buyer, ENV, agent_id="a", keys=empty)
    with pytest.raises(ValueError, match="no Kafka brokers configured"):
        build_agent(settings.model_copy(update={"kafka_bootstrap": None}), buyer, ENV, agent_id="a")
    with pytest.raises(KeyError, match="unknown env 'chess'; known: alfworld, dbbench, webshop"):
        build_agent(settings, buyer, "chess", agent_id="a")
    with pytest.raises(TypeError, match="a policy is"):
        build_agent(settings, "gpt", ENV, agent_id="a")  # type: ignore[arg-type]


def test_a_settings_file_is_read_with_its_paths_relative_to_it(tmp_path: Path) -> None:
    """`build_agent("agent.yaml", ...)`: the daemon's file format, `keys_dir` relative to the
    file; a bad value is the settings loader's error, naming the setting."""
    from harness_r1.daemon.settings import SettingsError

    folder = tmp_path / "conf"
    folder.mkdir()
    generate_keypair(folder / "keys", "ops-1")
    path = folder / "agent.yaml"
    path.write_text("keys_dir: keys\nloop:\n  history_turns: -1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="history_turns"):
        build_agent(path, buyer, ENV, agent_id="a")
    path.write_text("keys_dir: keys\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no Kafka brokers configured"):
        build_agent(str(path), buyer, ENV, agent_id="a")  # read as far as the brokers
