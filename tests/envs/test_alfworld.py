"""ALFWorld: the catalogue, the env contract on real games, walkthrough replays, the prompter."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_r1.contracts import TaskSpec
from harness_r1.envs import Env, get_suite
from harness_r1.envs.alfworld import (
    SUITE,
    AlfWorldEnv,
    AlfWorldPrompter,
    GameFileError,
    translation_cache,
)
from harness_r1.envs.alfworld.env import NOTHING_HAPPENS, initial_observation
from harness_r1.envs.alfworld.examples import EXAMPLES
from harness_r1.envs.alfworld.prompter import AVAILABLE_ACTIONS_LABEL, extract_action
from harness_r1.envs.alfworld.tasks import TASK_TYPES, load_tasks
from harness_r1.envs.base import EnvError
from harness_r1.envs.conformance import check_env
from harness_r1.envs.data import DataError

DATA_ROOT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
needs_data = pytest.mark.skipif(
    not (DATA_ROOT / "alfworld" / "valid_seen").is_dir(), reason="benchmark data not present"
)

EXPECTED_COUNTS = {
    "valid_seen": {
        "pick_and_place_simple": 35,
        "look_at_obj_in_light": 13,
        "pick_clean_then_place_in_recep": 27,
        "pick_heat_then_place_in_recep": 16,
        "pick_cool_then_place_in_recep": 25,
        "pick_two_obj_and_place": 24,
    },
    "valid_train": {
        "pick_and_place_simple": 46,
        "look_at_obj_in_light": 19,
        "pick_clean_then_place_in_recep": 37,
        "pick_heat_then_place_in_recep": 25,
        "pick_cool_then_place_in_recep": 28,
        "pick_two_obj_and_place": 45,
    },
    "train": dict.fromkeys(TASK_TYPES, 150),
}


@pytest.fixture(scope="module")
def valid_seen() -> list[TaskSpec]:
    return load_tasks(DATA_ROOT, "valid_seen")


@pytest.fixture(scope="module")
def env() -> Iterator[AlfWorldEnv]:
    """One engine for the module: each new instance loads another copy of fast-downward."""
    instance = AlfWorldEnv(DATA_ROOT)
    yield instance
    instance.close()


def _first_of_type(tasks: list[TaskSpec], task_type: str) -> TaskSpec:
    return next(t for t in tasks if t.task_type == task_type)


def _copy_game(task: TaskSpec, root: Path) -> Path:
    """A copy of one real game under a fresh data root (never write into the shared data)."""
    target = root / "alfworld" / "valid_seen" / task.task_id / "game.tw-pddl"
    target.parent.mkdir(parents=True)
    shutil.copyfile(DATA_ROOT / task.payload["game_file"], target)
    target.chmod(0o644)
    return target


# -- catalogue ---------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("split", ["valid_seen", "valid_train", "train"])
def test_listing_counts_per_split_and_task_type(split: str) -> None:
    tasks = load_tasks(DATA_ROOT, split)
    assert len(tasks) == sum(EXPECTED_COUNTS[split].values())
    assert Counter(t.task_type for t in tasks) == EXPECTED_COUNTS[split]
    assert [t.task_id for t in tasks] == sorted(t.task_id for t in tasks)
    assert len({t.task_id for t in tasks}) == len(tasks)
    for task in tasks:
        game_dir, trial_dir = task.task_id.split("/")
        assert game_dir.startswith(task.task_type + "-") and trial_dir.startswith("trial_")
        assert task.env == "alfworld" and task.split == split and task.max_steps == 35
        assert task.instruction and not task.instruction.startswith("Your task is to")
        assert task.payload["game_file"] == f"alfworld/{split}/{task.task_id}/game.tw-pddl"
        assert task.payload["walkthrough"], task.task_id


@needs_data
def test_a_repeated_listing_only_stats_the_files() -> None:
    load_tasks(DATA_ROOT, "train")
    start = time.perf_counter()
    assert len(load_tasks(DATA_ROOT, "train")) == 900
    assert time.perf_counter() - start < 2.0  # ~0.02 s measured; generous for shared CPUs


@needs_data
def test_instruction_is_the_goal_sentence_of_the_game(valid_seen: list[TaskSpec]) -> None:
    task = valid_seen[0]
    game = json.loads((DATA_ROOT / task.payload["game_file"]).read_text())
    assert f"Your task is to: {task.instruction}" in game["grammar"]
    assert task.payload["walkthrough"] == game["walkthrough"]


def test_missing_split_directory_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_tasks(tmp_path, "valid_seen")
    assert err.value.path == tmp_path / "alfworld" / "valid_seen"
    with pytest.raises(DataError):
        load_tasks(tmp_path, "../valid_seen")


@needs_data
def test_corrupt_or_missing_game_files_are_data_errors_naming_the_file(
    valid_seen: list[TaskSpec], tmp_path: Path
) -> None:
    game_file = _copy_game(valid_seen[0], tmp_path)
    assert [t.task_id for t in load_tasks(tmp_path, "valid_seen")] == [valid_seen[0].task_id]

    game_file.write_text('{"pddl_domain": "(define', encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_tasks(tmp_path, "valid_seen")
    assert err.value.path == game_file and "not valid JSON" in str(err.value)

    good = json.loads((DATA_ROOT / valid_seen[0].payload["game_file"]).read_text())
    game_file.write_text(json.dumps({**good, "grammar": "no goal here"}), encoding="utf-8")
    with pytest.raises(DataError, match="no `task` rule"):
        load_tasks(tmp_path, "valid_seen")

    game_file.unlink()
    with pytest.raises(DataError) as err:
        load_tasks(tmp_path, "valid_seen")
    assert err.value.path == game_file and "missing" in str(err.value)


@needs_data
def test_unsolvable_games_are_skipped_as_alfworld_does(
    valid_seen: list[TaskSpec], tmp_path: Path
) -> None:
    game_file = _copy_game(valid_seen[0], tmp_path)
    data = json.loads(game_file.read_text())
    game_file.write_text(json.dumps({**data, "solvable": False}), encoding="utf-8")
    assert load_tasks(tmp_path, "valid_seen") == []


def test_suite_wiring() -> None:
    assert get_suite("alfworld") is SUITE
    assert SUITE.splits == ("valid_seen", "valid_train", "train")
    assert SUITE.default_max_steps == 35
    files = SUITE.data_files(Path("/data"))
    assert {k: list(v) for k, v in files.items()} == {
        split: [Path("alfworld") / split] for split in SUITE.splits
    }
    assert isinstance(SUITE.make_env(Path("/nowhere")), Env)


# -- env on real games -------------------------------------------------------------------------


@needs_data
@pytest.mark.integration
def test_check_env_on_a_valid_seen_game(env: AlfWorldEnv, valid_seen: list[TaskSpec]) -> None:
    task = valid_seen[0]
    check_env(env, task)
    observation, info = env.reset(task, seed=123)
    assert observation.startswith("You are in the middle of a room.")
    assert observation.splitlines()[-1] == f"Your task is to: {task.instruction}"
    assert "Welcome to TextWorld" not in observation
    assert info == {
        "admissible_actions": info["admissible_actions"],
        "success": False,
        "invalid_action": False,
    }
    assert "look" in info["admissible_actions"] and "inventory" in info["admissible_actions"]


@needs_data
@pytest.mark.integration
@pytest.mark.parametrize(
    "task_type",
    ["look_at_obj_in_light", "pick_heat_then_place_in_recep", "pick_two_obj_and_place"],
)
def test_walkthrough_replay_wins(
    env: AlfWorldEnv, valid_seen: list[TaskSpec], task_type: str
) -> None:
    task = _first_of_type(valid_seen, task_type)
    walkthrough = task.payload["walkthrough"]
    env.reset(task)
    for number, action in enumerate(walkthrough, start=1):
        result = env.step(action)
        assert not result.info["invalid_action"], (action, result.observation)
        assert action not in ("", NOTHING_HAPPENS)
        if number < len(walkthrough):
            assert (result.reward, result.terminated, result.info["success"]) == (0.0, False, False)
    assert result.info["success"] is True
    assert result.reward == 1.0 and result.terminated and not result.truncated
    with pytest.raises(EnvError):
        env.step("look")


@needs_data
@pytest.mark.integration
def test_invalid_actions_and_same_game_reset(env: AlfWorldEnv, valid_seen: list[TaskSpec]) -> None:
    task = _first_of_type(valid_seen, "pick_and_place_simple")
    observation, info = env.reset(task)
    engine = env._gym
    go = next(a for a in info["admissible_actions"] if a.startswith("go to "))

    junk = env.step("xyzzy plugh")
    assert junk.observation == NOTHING_HAPPENS and junk.info["invalid_action"]
    assert not junk.terminated and junk.reward == 0.0
    shouted = env.step(go.upper())  # commands are case-sensitive: normalising is a patch's job
    assert shouted.info["invalid_action"]
    moved = env.step(f"  {go} ")
    assert not moved.info["invalid_action"] and moved.observation.startswith("You arrive at")
    again = env.step(go)  # already there: not admissible any more
    assert again.observation == NOTHING_HAPPENS and again.info["invalid_action"]

    observation2, info2 = env.reset(task, seed=7)
    assert (observation2, info2) == (observation, info)
    assert env._gym is engine  # the same engine, no new registration


@needs_data
@pytest.mark.integration
def test_a_game_is_translated_once_and_replays_from_the_memo(
    env: AlfWorldEnv, valid_seen: list[TaskSpec]
) -> None:
    """Resets after the first translate nothing (translation_cache.py) and the memoised game
    plays as the first one did: same opening, same admissible commands, its walkthrough wins."""
    task = _first_of_type(valid_seen, "pick_cool_then_place_in_recep")
    first = env.reset(task)
    env.step(task.payload["walkthrough"][0])
    hits, misses = translation_cache.translations()
    assert env.reset(task) == first
    assert translation_cache.translations() == (hits + 2, misses)  # plain and re-planning SAS
    for action in task.payload["walkthrough"]:
        result = env.step(action)
    assert result.info["success"] and result.terminated


@needs_data
@pytest.mark.integration
def test_expert_plan_from_policy_commands_wins(valid_seen: list[TaskSpec]) -> None:
    task = _first_of_type(valid_seen, "look_at_obj_in_light")
    expert = AlfWorldEnv(DATA_ROOT, expert_plan=True)
    try:
        _, info = expert.reset(task)
        assert "policy_commands" not in info and "expert_plan" not in info
        plan = list(expert.expert_plan or [])
        assert plan
        for action in plan:
            result = expert.step(action)
        assert result.info["success"] and result.reward == 1.0 and result.terminated
    finally:
        expert.close()


@needs_data
@pytest.mark.integration
def test_corrupt_game_at_reset_is_a_game_file_error(
    env: AlfWorldEnv, valid_seen: list[TaskSpec], tmp_path: Path
) -> None:
    game_file = _copy_game(valid_seen[0], tmp_path)
    game_file.write_text("{", encoding="utf-8")
    other = AlfWorldEnv(tmp_path)
    with pytest.raises(GameFileError) as err:
        other.reset(valid_seen[0])
    assert isinstance(err.value, DataError) and isinstance(err.value, EnvError)
    assert err.value.path == game_file
    with pytest.raises(EnvError):
        other.step("look")
    with pytest.raises(EnvError):
        env.reset(valid_seen[0].model_copy(update={"env": "webshop"}))
    escaping = valid_seen[0].model_copy(update={"payload": {"game_file": "../../etc/passwd"}})
    with pytest.raises(GameFileError, match="outside the data root"):
        env.reset(escaping)


@needs_data
@pytest.mark.integration
@pytest.mark.parametrize("task_type", sorted(EXAMPLES))
def test_prompt_examples_replay_on_their_games(env: AlfWorldEnv, task_type: str) -> None:
    example = EXAMPLES[task_type]
    game_dir, trial_dir = example.game_file.split("/")[2:4]
    task = TaskSpec(
        env="alfworld",
        split="train",
        task_id=f"{game_dir}/{trial_dir}",
        task_type=task_type,
        instruction="(example)",
        payload={"game_file": example.game_file},
    )
    observation, _ = env.reset(task)
    assert observation == example.observation
    for turn in example.turns:
        result = env.step(turn.action)
        assert result.observation == turn.observation
    assert result.info["success"] and result.terminated


# -- prompter ----------------------------------------------------------------------------------


def test_initial_observation_drops_the_banner() -> None:
    raw = "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in a room.\n\nYour task is to: x."
    assert initial_observation(raw) == "You are in a room.\nYour task is to: x."


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("THOUGHT: the cd is on the desk.\nACTION: go to desk 1", "go to desk 1"),
        ("Thought: hmm\nAction: Take CD 3 from Desk 1.", "take cd 3 from desk 1"),
        ('ACTION: "move cd 3 to sidetable 1"', "move cd 3 to sidetable 1"),
        ("**ACTION:** `open drawer 2`", "open drawer 2"),
        ("ACTION:\n  go to sidetable 1\nObservation: ...", "go to sidetable 1"),
        ("my next action: look\nACTION: inventory", "inventory"),
        ("I should look around.\n> examine desk 1", "examine desk 1"),
        ("go to  desk   1", "go to desk 1"),
        ("THOUGHT: a > b, so I go", "thought: a > b, so i go"),
        ("I will go to the desk", "i will go to the desk"),
        ("ACTION: go to the place with the cd", "go to the place with the cd"),
        ("", ""),
        ("   \n\n", ""),
    ],
)
def test_extract_action(raw: str, expected: str) -> None:
    assert extract_action(raw) == expected
    assert AlfWorldPrompter().extract_action(raw, {"admissible_actions": ["go to desk 1"]}) == (
        expected
    )


def test_extract_action_never_raises_on_odd_input() -> None:
    assert extract_action(None) == ""  # type: ignore[arg-type]


def _task(task_type: str) -> TaskSpec:
    return TaskSpec(
        env="alfworld",
        split="valid_seen",
        task_id="x/trial_1",
        task_type=task_type,
        instruction="put some cd on sidetable.",
    )


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_system_prompt_has_the_instructions_and_an_example_of_the_same_type(
    task_type: str,
) -> None:
    prompt = AlfWorldPrompter().system_prompt(_task(task_type))
    assert prompt.startswith("Interact with a household to solve a task.")
    for template in ("go to {recep}", "take {obj} from {recep}", "move {obj} to {recep}", "look"):
        assert template in prompt
    assert "THOUGHT: <your thoughts>\nACTION: <your next action>" in prompt
    example = EXAMPLES[task_type]
    assert example.observation in prompt
    assert all(f"ACTION: {turn.action}" in prompt for turn in example.turns)
    others = [e for t, e in EXAMPLES.items() if t != task_type]
    assert not any(e.observation in prompt for e in others)


def test_admissible_actions_in_messages_follow_the_flag() -> None:
    info = {"admissible_actions": ["go to desk 1", "look"], "success": False}
    on, off = AlfWorldPrompter(), AlfWorldPrompter(show_admissible=False)
    assert on.feedback_message("You arrive at desk 1.", info) == (
        f"You arrive at desk 1.\n{AVAILABLE_ACTIONS_LABEL}go to desk 1, look"
    )
    assert off.feedback_message("You arrive at desk 1.", info) == "You arrive at desk 1."
    assert on.feedback_message("x", {"admissible_actions": None}) == "x"
    first = on.first_message(_task("pick_and_place_simple"), "You are in a room.", info)
    assert first.startswith("Here is your task.\nYou are in a room.")
    assert first.endswith("go to desk 1, look")
    assert "AVAILABLE ACTIONS" in on.system_prompt(_task("pick_and_place_simple"))
    assert "AVAILABLE ACTIONS" not in off.system_prompt(_task("pick_and_place_simple"))
