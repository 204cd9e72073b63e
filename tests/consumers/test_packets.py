"""The failure-packet extractor: selection, budget, masking, signals, determinism."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness_r1.consumers.constraints import task_constraints
from harness_r1.consumers.packets import (
    CUT_MARKER,
    NoFailures,
    PacketConfig,
    build_packet,
    build_packet_from_jsonl,
    canonical_json,
    packet_tokens,
    read_trajectories,
)
from harness_r1.consumers.signals import (
    INVALID_PREFIX,
    NOTHING_HAPPENS,
    count_loops,
    count_signals,
    is_invalid,
)
from harness_r1.contracts import (
    FailurePacket,
    HookFault,
    HookName,
    Outcome,
    Step,
    TargetRef,
    TaskRef,
    Termination,
    Timings,
    Trajectory,
)

REPO = Path(__file__).resolve().parents[2]
DB_INVALID = (
    "Invalid action. Use `sql: <one SQL statement>` to run SQL, or "
    '`answer: ["ANSWER1", "ANSWER2", ...]` to commit the final answer.'
)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def traj(
    trajectory_id: str,
    moves: list[tuple[str, str]],
    *,
    env: str = "dbbench",
    task_id: str | None = None,
    task_type: str = "counting",
    instruction: str = "How many rows?",
    reward: float = 0.0,
    success: bool = False,
    termination: Termination = Termination.STEP_LIMIT,
    harness_version: str = "base",
    model_version: str = "1",
    faults_at: tuple[int, ...] = (),
    start_faults: int = 0,
) -> Trajectory:
    fault = HookFault(hook=HookName.PRE_ACTION, reason="raised", detail="boom")
    steps = [
        Step(
            index=i,
            observation="obs",
            raw_output=action,
            action=action,
            feedback=feedback,
            faults=[fault] if i in faults_at else [],
        )
        for i, (action, feedback) in enumerate(moves)
    ]
    return Trajectory(
        trajectory_id=trajectory_id,
        agent_id="agent-7",
        target=TargetRef(model_id="tiny", version=model_version),
        harness_version=harness_version,
        task=TaskRef(
            env=env,
            split="dev",
            task_id=task_id or f"task-{trajectory_id}",
            task_type=task_type,
            instruction=instruction,
            seed=0,
        ),
        episode_start_faults=[fault] * start_faults,
        steps=steps,
        outcome=Outcome(success=success, reward=reward, termination=termination, steps=len(steps)),
        timings=Timings(started_at=NOW, finished_at=NOW),
    )


def db_batch(n: int = 10) -> list[Trajectory]:
    """n failed DBBench-like episodes of three types, with long invalid outputs."""
    types = ["INSERT", "counting", "UPDATE"]
    out = []
    for i in range(n):
        junk = f"I think the answer number {i} is " + "very " * 60
        moves = [(junk, DB_INVALID)] * 4 + [(f"sql: SELECT c{i} FROM t", "[]")]
        out.append(
            traj(
                f"traj-{i:03d}",
                moves,
                task_type=types[i % 3],
                instruction=f"Question {i}. The name of this table is Tab {i}, and the headers "
                f"of this table are A,B,C.",
                reward=(i % 4) / 4,
            )
        )
    return out


# -- determinism -----------------------------------------------------------------------------


def test_same_input_gives_byte_identical_packets_in_any_input_order() -> None:
    batch = db_batch()
    config = PacketConfig(token_budget=3000)
    first = build_packet(batch, config).to_json_bytes()
    assert build_packet(batch, config).to_json_bytes() == first
    for seed in range(5):
        shuffled = list(batch)
        random.Random(seed).shuffle(shuffled)
        assert build_packet(shuffled, config).to_json_bytes() == first
    assert build_packet(reversed(batch), config).to_json_bytes() == first
    # exact duplicates (a redelivered message) change nothing either
    assert build_packet(batch + batch[:3], config).to_json_bytes() == first


def test_packet_id_is_sha256_of_canonical_json_without_it() -> None:
    packet = build_packet(db_batch(), PacketConfig(token_budget=3000))
    body = json.loads(packet.to_json_bytes())
    del body["packet_id"]
    assert packet.packet_id == hashlib.sha256(canonical_json(body)).hexdigest()
    assert FailurePacket.from_json_bytes(packet.to_json_bytes()) == packet


def test_different_config_gives_a_different_packet_id() -> None:
    batch = db_batch()
    a = build_packet(batch, PacketConfig(token_budget=3000))
    b = build_packet(batch, PacketConfig(token_budget=3000, selection="lowest_reward"))
    assert a.packet_id != b.packet_id


# -- selection ---------------------------------------------------------------------------------


def selection_batch() -> list[Trajectory]:
    rows = [  # name, type, reward, success
        ("e1", "b", 0.5, False),
        ("e2", "a", 0.2, False),
        ("e3", "a", 0.0, False),
        ("e4", "c", 0.2, False),
        ("e5", "b", 0.2, False),
        ("e6", "a", 0.2, False),
        ("e7", "c", 1.0, True),
    ]
    return [
        traj(
            f"traj-{name}",
            [("look", "ok")],
            env="webshop",
            task_type=kind,
            instruction=f"buy widget {name}",
            reward=reward,
            success=success,
            termination=Termination.SUCCESS if success else Termination.FAILURE,
        )
        for name, kind, reward, success in rows
    ]


def _names(packet: FailurePacket) -> list[str]:
    return [e.instruction.rsplit(" ", 1)[1] for e in packet.episodes]


def test_round_robin_over_sorted_types_lowest_reward_then_id_within_a_type() -> None:
    packet = build_packet(selection_batch(), PacketConfig(token_budget=100_000))
    assert _names(packet) == ["e3", "e5", "e4", "e2", "e1", "e6"]
    assert [e.masked_task_id for e in packet.episodes] == ["T1", "T2", "T3", "T4", "T5", "T6"]
    assert (packet.batch_size, packet.failures) == (7, 6)


def test_lowest_reward_first_ties_by_type_then_id() -> None:
    config = PacketConfig(token_budget=100_000, selection="lowest_reward")
    packet = build_packet(selection_batch(), config)
    assert _names(packet) == ["e3", "e2", "e6", "e5", "e4", "e1"]
    assert packet.selection == "lowest_reward"


def test_max_episodes_caps_the_selection() -> None:
    packet = build_packet(selection_batch(), PacketConfig(token_budget=100_000, max_episodes=2))
    assert _names(packet) == ["e3", "e5"]


def test_successful_episodes_are_excluded_and_partial_rewards_are_failures() -> None:
    batch = selection_batch()
    packet = build_packet(batch, PacketConfig(token_budget=100_000))
    assert "e7" not in _names(packet)
    won = [t for t in batch if t.outcome.success]
    with pytest.raises(NoFailures):
        build_packet(won)
    # success true but reward below 1 still counts as a failure
    partial = traj("traj-p", [("x", "y")], reward=0.75, success=True)
    assert build_packet([partial]).failures == 1


def test_the_same_task_twice_keeps_one_alias() -> None:
    a = traj("traj-a", [("x", "y")], task_id="dev-007", task_type="a")
    b = traj("traj-b", [("x", "y")], task_id="dev-007", task_type="a", reward=0.5)
    c = traj("traj-c", [("x", "y")], task_id="dev-008", task_type="a", reward=0.2)
    packet = build_packet([a, b, c], PacketConfig(token_budget=100_000))
    assert [e.masked_task_id for e in packet.episodes] == ["T1", "T2", "T1"]


# -- budget ------------------------------------------------------------------------------------


def test_budget_is_respected_and_no_further_episode_would_fit() -> None:
    batch = db_batch(12)
    counts = []
    for budget in (700, 900, 1200, 1600, 2500, 4000):
        config = PacketConfig(token_budget=budget, max_episodes=12)
        packet = build_packet(batch, config)
        assert packet_tokens(packet) <= budget
        assert packet.token_budget == budget
        k = len(packet.episodes)
        counts.append(k)
        if k < 12:  # the packet with one more episode would have broken the budget
            bigger = build_packet(batch, PacketConfig(token_budget=10**6, max_episodes=k + 1))
            assert packet_tokens(bigger) > budget
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_first_episode_is_shrunk_rather_than_dropped_and_a_hopeless_budget_fails() -> None:
    moves = [(f"act {i} " + "x" * 300, f"feedback {i} " + "y" * 300) for i in range(6)]
    one = [traj("traj-long", moves, termination=Termination.FAILURE)]
    full = build_packet(one, PacketConfig(token_budget=10**6, snippet_window=3))
    assert [s.step for s in full.episodes[0].snippets] == [2, 3, 4, 5]  # no streak: last 4
    budget = packet_tokens(full) - 50
    shrunk = build_packet(one, PacketConfig(token_budget=budget, snippet_window=3))
    assert packet_tokens(shrunk) <= budget
    assert [s.step for s in shrunk.episodes[0].snippets] == [3, 4, 5]
    with pytest.raises(ValueError, match="too small for even one episode"):
        build_packet(one, PacketConfig(token_budget=50))


# -- snippets and the failure point ------------------------------------------------------------


def test_snippets_surround_the_longest_invalid_streak_and_keep_a_decisive_last_step() -> None:
    moves = [(f"sql: SELECT {i}", f"[({i},)]") for i in range(4)]
    moves += [(f"junk {i}", DB_INVALID) for i in range(4, 8)]
    moves += [("sql: SELECT 8", "[(8,)]"), ("answer: [8]", "")]
    ended = traj("traj-f", moves, termination=Termination.FAILURE)
    config = PacketConfig(token_budget=10**6, snippet_window=2, snippet_after=1)
    [episode] = build_packet([ended], config).episodes
    assert (episode.failure_step, episode.failure_streak) == (4, 4)
    assert [s.step for s in episode.snippets] == [2, 3, 4, 5, 9]
    assert episode.snippets[2].flags == ["invalid"]
    # ran out of steps: the last step is not added
    timed_out = traj("traj-s", moves[:9], termination=Termination.STEP_LIMIT)
    [episode] = build_packet([timed_out], config).episodes
    assert [s.step for s in episode.snippets] == [2, 3, 4, 5]


def test_without_a_streak_the_last_steps_are_shown() -> None:
    moves = [(f"sql: SELECT {i}", f"[({i},)]") for i in range(6)]
    [episode] = build_packet([traj("traj-n", moves)], PacketConfig(snippet_window=2)).episodes
    assert (episode.failure_step, episode.failure_streak) == (5, 0)
    assert [s.step for s in episode.snippets] == [3, 4, 5]


def test_an_episode_without_steps_has_no_snippets() -> None:
    [episode] = build_packet([traj("traj-0", [], termination=Termination.ERROR)]).episodes
    assert episode.snippets == [] and episode.failure_step is None


def test_long_actions_and_observations_are_cut_with_a_marker() -> None:
    moves = [("a" * 50, "b" * 30), ("short", "tiny")]
    config = PacketConfig(max_action_chars=10, max_observation_chars=20)
    [episode] = build_packet([traj("traj-c", moves)], config).episodes
    first, second = episode.snippets
    assert first.action == "a" * 10 + CUT_MARKER.format(n=40) == "aaaaaaaaaa ...[40 chars cut]"
    assert first.observation == "b" * 20 + " ...[10 chars cut]"
    assert (second.action, second.observation) == ("short", "tiny")


# -- masking -----------------------------------------------------------------------------------


def test_task_and_trajectory_ids_never_reach_the_packet() -> None:
    tid = "0f3c9a1e7b2d4c5f8a9b0c1d2e3f4a5b"
    batch = [
        traj(
            tid,
            [("sql: SELECT * FROM t WHERE id = 'dev-042'", f"Error: trace {tid} in dev-042")],
            task_id="dev-042",
            instruction="Task dev-042: how many rows? (see also dev-099)",
        ),
        traj(
            "ffe1d2c3b4a5968778695a4b3c2d1e0f",
            [("x", "y")],
            task_id="dev-099",
            success=True,
            reward=1.0,
            termination=Termination.SUCCESS,
        ),
    ]
    packet = build_packet(batch)
    text = packet.to_json_bytes().decode()
    for secret in ("dev-042", "dev-099", tid, "ffe1d2c3b4a5968778695a4b3c2d1e0f", "agent-7"):
        assert secret not in text
    [episode] = packet.episodes
    assert episode.instruction == "Task T1: how many rows? (see also [task])"
    assert episode.snippets[0].observation == "Error: trace [episode] in T1"
    # entity names and numbers are content: they stay
    assert "SELECT * FROM t WHERE id = 'T1'" in episode.snippets[0].action


def test_alfworld_path_ids_are_masked_whole_and_by_part() -> None:
    task_id = "pick_and_place_simple-Egg-None-Fridge-12/trial_T20190909_044715_250790"
    moves = [("go to fridge 1", "Nothing happens."), ("say trial_T20190909_044715_250790", "")]
    packet = build_packet(
        [
            traj(
                "traj-alf",
                moves,
                env="alfworld",
                task_id=task_id,
                task_type="pick_and_place_simple",
                instruction="put a egg in fridge.",
            )
        ]
    )
    text = packet.to_json_bytes().decode()
    assert "trial_T2019" not in text and "Fridge-12" not in text
    [episode] = packet.episodes
    assert episode.instruction == "put a egg in fridge."  # objects are task content
    assert episode.constraints == ["goal: put a egg in fridge"]
    assert episode.snippets[1].action == "say T1"


def test_webshop_asins_get_packet_local_aliases() -> None:
    page = "Results [SEP] B07SKN25VL [SEP] Wig [SEP] $32.70 [SEP] B0XU4GP4RL [SEP] Clip"
    moves = [("search[wig]", page), ("click[b07skn25vl]", "Item B07SKN25VL [SEP] Buy Now")]
    packet = build_packet([traj("traj-ws", moves, env="webshop", task_type="wigs")])
    text = packet.to_json_bytes().decode()
    assert "B07SKN25VL" not in text.upper() and "B0XU4GP4RL" not in text
    snippets = packet.episodes[0].snippets
    assert snippets[0].observation == page.replace("B07SKN25VL", "ASIN-1").replace(
        "B0XU4GP4RL", "ASIN-2"
    )
    assert snippets[1].action == "click[ASIN-1]"
    assert snippets[1].observation == "Item ASIN-1 [SEP] Buy Now"


# -- constraints -------------------------------------------------------------------------------


def test_constraints_per_env() -> None:
    ws = (
        "i am looking to buy a woman's us size 5 high heel shoe with a rubber sole and color "
        "patent-beige, pack of 2, and price lower than 70.00 dollars"
    )
    assert task_constraints("webshop", "shoes", ws) == [
        "price < 70.00 dollars",
        "option: size 5",
        "option: color patent-beige",
        "option: pack of 2",
    ]
    assert task_constraints("webshop", "x", "i need 6.76 fl oz of mn4 color foundation") == [
        "option: 6.76 fl oz",
        "option: color mn4",
    ]
    db = (
        "Update the winner to 'Naomi Osaka' for 2015. The name of this table is Award Winners, "
        "and the headers of this table are Year,Winner,Sport."
    )
    assert task_constraints("dbbench", "UPDATE", db) == [
        "statement: UPDATE (modify the table; the table itself is scored)",
        "table: Award Winners",
        "columns: Year,Winner,Sport",
    ]
    assert task_constraints("dbbench", "counting", "How many? No table sentence.") == [
        "statement: SELECT-style query (answer with values; type counting)"
    ]
    assert task_constraints("alfworld", "t", "put a clean egg in microwave.") == [
        "goal: put a clean egg in microwave"
    ]
    assert task_constraints("door", "t", "open it") == []


# -- signals -----------------------------------------------------------------------------------


def test_every_signal_is_counted_on_hand_made_episodes() -> None:
    db = traj(
        "traj-db",
        [
            ("sql: SELECT a FROM t", "[]"),  # empty result
            ("sql: SELECT a FROM t", "[]"),  # repeated + empty result
            ("sql: INSERT INTO t VALUES (1)", "[]"),  # a modification: not an empty result
            ("sql: SELEC a", "Error: near SELEC"),  # SQL error
            ("hello", DB_INVALID),  # invalid
            ("hello", DB_INVALID),  # repeated + invalid
            ("Nothing happens?", NOTHING_HAPPENS),  # nothing happens, not invalid in dbbench
        ],
        faults_at=(5,),
        start_faults=1,
    )
    alf = traj(
        "traj-alf",
        [(a, NOTHING_HAPPENS) for a in ["a", "b", "a", "b", "a", "b", "c", "c"]]
        + [(a, "You arrive.") for a in ["d", "e", "f"] * 3],
        env="alfworld",
        termination=Termination.FAILURE,
    )
    ws = traj(
        "traj-ws",
        [("click[x]", "Invalid action 'click[x]': not clickable. Nothing changed.\npage")] * 2,
        env="webshop",
    )
    signals = count_signals([db, alf, ws])
    assert signals.model_dump() == {
        "repeated_actions": 2 + 1 + 1,
        "invalid_actions": 2 + 8 + 2,
        "nothing_happens": 1 + 8,
        "empty_sql_results": 2,
        "sql_errors": 1,
        "step_limit_hits": 2,  # db and ws; alf ended in failure
        "loops": 2,  # (a b) x3 and (d e f) x3
        "hook_faults": 2,
    }
    # the same counts come out of a packet over one env's batch
    packet = build_packet([db], PacketConfig(token_budget=10**6))
    assert packet.signals == count_signals([db])
    assert packet.signals.hook_faults == 2 and packet.signals.empty_sql_results == 2
    flags = [s.flags for s in packet.episodes[0].snippets]
    assert ["repeated", "invalid", "hook_fault"] in flags


def test_signals_cover_only_the_selected_episodes() -> None:
    batch = db_batch(6)
    packet = build_packet(batch, PacketConfig(token_budget=10**6, max_episodes=2))
    assert len(packet.episodes) == 2
    assert packet.signals.step_limit_hits == 2 and packet.signals.invalid_actions == 2 * 4


@pytest.mark.parametrize(
    ("actions", "loops"),
    [
        (["a", "b"] * 3, 1),
        (["a", "b"] * 2 + ["a"], 0),
        (["x"] * 6, 0),
        (["a", "b", "c"] * 3, 1),
        (["a", "a", "b"] * 3, 1),
        (["a", "b", "c"] * 2 + ["a", "b"], 0),
        (["a", "b"] * 6, 1),
        (["a", "b"] * 3 + ["c"] + ["a", "b"] * 3, 2),
        ([], 0),
    ],
)
def test_loops_are_period_2_or_3_cycles_repeated_three_times(
    actions: list[str], loops: int
) -> None:
    assert count_loops(actions) == loops


def test_invalid_action_rules_per_env_match_the_envs_own_texts() -> None:
    from harness_r1.envs.dbbench.env import INVALID_OBSERVATION
    from harness_r1.harness.context import NOTHING_HAPPENS as RUNTIME_NOTHING

    assert RUNTIME_NOTHING == NOTHING_HAPPENS
    assert INVALID_OBSERVATION.startswith(INVALID_PREFIX)
    assert is_invalid("dbbench", INVALID_OBSERVATION)
    assert is_invalid("alfworld", "Nothing happens.\n")
    assert not is_invalid("alfworld", "Invalid action")
    assert not is_invalid("dbbench", NOTHING_HAPPENS)
    assert is_invalid("webshop", "Invalid action 'x': why. Nothing changed.\npage")
    assert is_invalid("door", "[invalid] no such door")
    assert is_invalid("door", NOTHING_HAPPENS) and not is_invalid("door", "The door opens.")


# -- batches and files -------------------------------------------------------------------------


def test_a_mixed_batch_is_rejected() -> None:
    base = traj("traj-1", [("x", "y")])
    for other in (
        traj("traj-2", [("x", "y")], env="alfworld"),
        traj("traj-2", [("x", "y")], model_version="2"),
        traj("traj-2", [("x", "y")], harness_version="ov-1"),
    ):
        with pytest.raises(ValueError, match="must share env, target and harness version"):
            build_packet([base, other])
    with pytest.raises(ValueError, match="share trajectory_id"):
        build_packet([base, traj("traj-1", [("x", "z")])])
    with pytest.raises(ValueError, match="empty batch"):
        build_packet([])


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="selection"):
        PacketConfig(selection="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PacketConfig(token_budget=0)
    with pytest.raises(ValueError):
        PacketConfig(max_action_chars=0)


def test_jsonl_groups_into_one_packet_per_batch(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    rows = [
        traj("traj-1", [("x", "y")], harness_version="ov-1"),
        traj("traj-2", [("x", "y")]),
        traj("traj-3", [("x", "y")], env="alfworld"),
        traj("traj-4", [("x", "y")], success=True, reward=1.0, model_version="9"),
    ]
    path.write_text("\n".join(r.to_json_bytes().decode() for r in rows) + "\n\n")
    packets = build_packet_from_jsonl(path)
    assert [(p.env, p.harness_version, p.batch_size) for p in packets] == [
        ("alfworld", "base", 1),
        ("dbbench", "base", 1),
        ("dbbench", "ov-1", 1),
    ]  # the all-successful group (model version 9) yields no packet


def test_a_malformed_line_is_named(tmp_path: Path) -> None:
    good = traj("traj-1", [("x", "y")]).to_json_bytes().decode()
    path = tmp_path / "runs.jsonl"
    path.write_text(f"{good}\n\n{{not json\n")
    with pytest.raises(ValueError, match=r"runs\.jsonl:3: not a valid Trajectory"):
        read_trajectories(path)
    path.write_text(f"{good}\n{json.dumps({'trajectory_id': 'x'})}\n")
    with pytest.raises(ValueError, match=r"runs\.jsonl:2: .*agent_id"):
        build_packet_from_jsonl(path)


def real_dbbench_runs(path: Path) -> Path:
    """Real DBBench episodes (SQLite, AgentBench scoring) of a scripted target that answers
    junk, like SmolLM2 mostly does (a test double for the model, named as such)."""
    from harness_r1.daemon.settings import Settings
    from harness_r1.envs import get_suite
    from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
    from harness_r1.harness.policies import ScriptedPolicy
    from harness_r1.harness.tasks import spread

    root = Settings().data_root()
    suite = get_suite("dbbench")
    tasks = spread(suite.load_tasks(root, "dev"), 12)
    replies = ["The answer is: 12", "Action: Operation\n```sql\nSELECT 1;\n```"]
    runtime = HarnessRuntime(suite, ScriptedPolicy(replies), root, RunConfig(max_steps=4))
    try:
        specs = [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
        trajectories = runtime.run(specs)
    finally:
        runtime.close()
    path.write_text("".join(t.to_json_bytes().decode() + "\n" for t in trajectories))
    return path


def test_real_dbbench_runs_give_a_deterministic_masked_packet(tmp_path: Path) -> None:
    runs = real_dbbench_runs(tmp_path / "runs.jsonl")
    trajectories = read_trajectories(runs)
    config = PacketConfig(token_budget=4000, max_episodes=8)
    [packet] = build_packet_from_jsonl(runs, config)
    assert packet.env == "dbbench" and packet.batch_size == len(trajectories)
    assert packet.failures == sum(
        1 for t in trajectories if not t.outcome.success or t.outcome.reward < 1
    )
    assert 1 <= len(packet.episodes) <= config.max_episodes
    assert packet_tokens(packet) <= config.token_budget
    data = packet.to_json_bytes()
    text = data.decode()
    for t in trajectories:
        assert t.trajectory_id not in text and f'"{t.task.task_id}"' not in text
        assert t.task.task_id not in text
    # round robin: the first episodes cover each task type once, in sorted order
    types = [e.task_type for e in packet.episodes]
    distinct = sorted(set(types))
    assert types[: len(distinct)] == distinct
    assert packet.signals.step_limit_hits >= 1 and packet.signals.invalid_actions >= 1
    shuffled = list(trajectories)
    random.Random(3).shuffle(shuffled)
    assert build_packet(shuffled, config).to_json_bytes() == data


# -- the incumbent's hooks (issue 17) --------------------------------------------------------

VETO_CODE = "def hook(ctx, state):\n    return None\n"
NOTE_CODE = "def hook(ctx, state):\n    return 'Use SQL.'\n"


def test_the_incumbents_hooks_come_first_and_a_base_packet_keeps_its_bytes() -> None:
    batch = db_batch(6)
    base = build_packet(batch)
    assert b'"incumbent"' not in base.to_json_bytes()  # the base harness: same bytes as before
    assert build_packet(batch, incumbent={}) == base
    live = build_packet(
        batch, incumbent={"pre_action": [VETO_CODE, NOTE_CODE], HookName.PRE_DECISION: [NOTE_CODE]}
    )
    assert [(h.hook, h.links) for h in live.incumbent] == [
        (HookName.PRE_DECISION, 1),
        (HookName.PRE_ACTION, 2),
    ]
    assert live.incumbent[1].code.startswith("# link 1 of 2\ndef hook(ctx, state):")
    assert "# link 2 of 2\n" in live.incumbent[1].code
    assert live.packet_id != base.packet_id
    assert FailurePacket.from_json_bytes(live.to_json_bytes()) == live


def test_the_incumbent_takes_at_most_its_share_of_the_budget_and_episodes_the_rest() -> None:
    batch = db_batch(12)
    config = PacketConfig(token_budget=1600, max_episodes=12, incumbent_share=0.4)
    huge = "def hook(ctx, state):\n" + "    x = 1\n" * 2000 + "    return None\n"
    packet = build_packet(batch, config, incumbent={"pre_action": [huge], "post_feedback": [huge]})
    assert packet_tokens(packet) <= 1600
    shown = sum(len(json.dumps(h.code)) for h in packet.incumbent)
    assert shown <= 1600 * 0.4 * 4
    assert all("chars cut]" in h.code for h in packet.incumbent)
    assert packet.episodes, "the incumbent left no room for a single episode"
    alone = build_packet(batch, config)
    assert len(packet.episodes) < len(alone.episodes)


def test_a_packet_says_when_only_the_generic_rules_made_it() -> None:
    """A plugin's env has no written rules: the packet says `generic` (and the engineer's
    prompt says what that means), while a built-in env's packet keeps its bytes."""
    from harness_r1.trainer.prompt_packet import packet_text

    moves = [("go east", "[invalid] no exit east"), ("go east", "You can't go that way.")]
    plugin = build_packet(
        [traj(f"tw-{i}", moves, env="textworld", task_type="coin") for i in range(3)],
        PacketConfig(),
    )
    assert plugin.rules == "generic"
    assert json.loads(plugin.to_json_bytes())["rules"] == "generic"
    assert plugin.signals.invalid_actions == 3  # the generic marker is still recognised
    assert "No rules are written for env textworld" in packet_text(plugin)
    assert plugin.episodes[0].constraints == []

    builtin = build_packet(db_batch(), PacketConfig())
    assert builtin.rules == "env"
    assert "rules" not in json.loads(builtin.to_json_bytes())
    assert "No rules are written" not in packet_text(builtin)
