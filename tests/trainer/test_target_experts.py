"""Demonstration rows for the deployed target: the prompts the runtime built, one conversation
per stretch of prompts that extend each other, and labels on the expert's replies only."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_r1.envs import get_suite
from harness_r1.trainer.target_experts import demonstrate, episode_rows

DATA_ROOT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
pytestmark = pytest.mark.skipif(not DATA_ROOT.is_dir(), reason="benchmark data not present")


def _dbbench_rows(history_turns: int) -> tuple[list, list]:
    suite = get_suite("dbbench")
    demos = demonstrate(
        suite, DATA_ROOT, suite.load_tasks(DATA_ROOT, "standard")[:3], history_turns=history_turns
    )
    return demos.records, episode_rows(demos)


def test_an_episode_whose_prompts_extend_each_other_is_one_row_trained_on_every_reply():
    records, rows = _dbbench_rows(history_turns=6)
    assert len(rows) == 3 and all(r["metadata"]["steps"] == [0, 1] for r in rows)
    for row in rows:
        messages = row["messages"]
        assert row["train_from"] == 2
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
        # the last step's prompt is the row up to its reply, exactly as the runtime sent it
        last = [r for r in records if r.step == 1 and r.messages[1] == messages[1]][0]
        assert messages[:-1] == last.messages and messages[-1]["content"] == last.output


def test_a_window_that_drops_history_starts_a_new_row_per_step():
    records, rows = _dbbench_rows(history_turns=0)
    assert len(rows) == 6
    for row in rows:
        assert len(row["messages"]) == 3 and row["train_from"] == 2
    assert sorted(tuple(r["metadata"]["steps"]) for r in rows) == [
        (0,),
        (0,),
        (0,),
        (1,),
        (1,),
        (1,),
    ]


def test_failed_demonstrations_give_no_rows():
    suite = get_suite("dbbench")
    tasks = suite.load_tasks(DATA_ROOT, "standard")
    demos = demonstrate(suite, DATA_ROOT, tasks[:40], history_turns=6)
    failed = {t.task.task_id for t in demos.trajectories if not t.outcome.success}
    assert failed  # gold SQL in MySQL syntax that SQLite cannot replay, for one
    assert not failed & {r["metadata"]["task_id"] for r in episode_rows(demos)}


def test_tokenised_rows_train_on_the_replies_and_their_end_of_turn_only():
    from transformers import AutoTokenizer

    from harness_r1.models.local_models import SMOLLM2, converted_checkpoint
    from harness_r1.trainer.deployed_target import tokenize_row

    tokenizer = AutoTokenizer.from_pretrained(str(converted_checkpoint(SMOLLM2)))
    _, rows = _dbbench_rows(history_turns=6)
    row = rows[0]
    tokens = tokenize_row(row, tokenizer)
    trained = [
        t for t, label in zip(tokens["input_ids"], tokens["labels"], strict=True) if label != -100
    ]
    replies = [
        m["content"] for m in row["messages"][row["train_from"] :] if m["role"] == "assistant"
    ]
    assert tokenizer.decode(trained) == "".join(f"{reply}<|im_end|>" for reply in replies)
    assert tokenizer.decode(tokens["input_ids"]) == tokenizer.apply_chat_template(
        row["messages"], tokenize=False
    )
