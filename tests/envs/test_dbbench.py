"""DBBench on SQLite: loading, the env contract, AgentBench's scoring, and a gold replay."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import TaskSpec
from harness_r1.envs import get_suite
from harness_r1.envs.base import EnvError
from harness_r1.envs.conformance import check_env
from harness_r1.envs.data import DataError
from harness_r1.envs.dbbench import SUITE, DBBenchEnv
from harness_r1.envs.dbbench.database import TableSpec, TaskDatabase, mysql_table_hash
from harness_r1.envs.dbbench.prompter import INVALID_FEEDBACK
from harness_r1.envs.dbbench.scoring import (
    answers_match,
    hashes_match,
    is_modification,
    parse_answer,
    rows_to_answer,
)
from harness_r1.envs.dbbench.sqltext import to_sqlite

DATA_ROOT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
needs_data = pytest.mark.skipif(
    not (DATA_ROOT / "dbbench" / "dev.jsonl").is_file(), reason="benchmark data not present"
)


@pytest.fixture(scope="module")
def all_tasks() -> list[TaskSpec]:
    return [t for split in SUITE.splits for t in SUITE.load_tasks(DATA_ROOT, split)]


def _reference_hash(rows: list[tuple[str | None, ...]]) -> str:
    """An independent spelling of MySQL's md5(group_concat(substring(md5(concat_ws)),1,5)))."""
    parts = []
    for row in rows:
        joined = ",".join(v for v in row if v is not None)
        parts.append(hashlib.md5(joined.encode()).hexdigest()[:5])
    parts.sort()
    return hashlib.md5(",".join(parts).encode()[:1024]).hexdigest()


def _task(task_type: str, rows: list[list[str]], **payload: Any) -> TaskSpec:
    table = {
        "table_name": "Medal Table",
        "table_info": {
            "columns": [{"name": "Nation", "type": "TEXT"}, {"name": "Gold", "type": "INT"}],
            "rows": rows,
        },
    }
    return TaskSpec(
        env="dbbench",
        split="dev",
        task_id="dev-900",
        task_type=task_type,
        instruction="hand-made",
        max_steps=15,
        payload={
            "table": table,
            "type": [task_type],
            "description": "q",
            "add_description": "t",
            **payload,
        },
    )


ROWS = [["Norway", "4"], ["Sweden", "12"], ["Finland", "2.5"], ["Montréal", "0"]]


# -- suite and loading ---------------------------------------------------------------------
@needs_data
def test_suite_loads_both_splits(all_tasks: list[TaskSpec]) -> None:
    assert get_suite("dbbench") is SUITE
    assert SUITE.splits == ("dev", "standard") and SUITE.default_max_steps == 15
    dev = [t for t in all_tasks if t.split == "dev"]
    standard = [t for t in all_tasks if t.split == "standard"]
    assert len(dev) == 60 and len(standard) == 150
    assert dev[7].task_id == "dev-007" and standard[-1].task_id == "standard-149"
    assert {t.task_type for t in dev} >= {"INSERT", "UPDATE", "counting", "aggregation-SUM"}
    first = dev[0]
    assert first.instruction.startswith("What is the Presentation of Credentials")
    assert "The name of this table is" in first.instruction
    assert set(first.payload) >= {"table", "label", "sql", "answer_md5", "type"}
    for split, paths in SUITE.data_files(DATA_ROOT).items():
        assert split in SUITE.splits and all(p.is_file() for p in paths)


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        SUITE.load_tasks(tmp_path, "dev")
    assert "dev.jsonl" in str(err.value) and "missing" in str(err.value)


def test_malformed_line_and_missing_field_name_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "dbbench"
    folder.mkdir()
    good = {
        "description": "d",
        "add_description": "a",
        "type": ["counting"],
        "label": ["1"],
        "table": {"table_name": "t", "table_info": {"columns": [{"name": "c"}], "rows": [["1"]]}},
    }
    path = folder / "dev.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        SUITE.load_tasks(tmp_path, "dev")
    assert str(path) in str(err.value) and "line 2" in str(err.value)

    lacking = {k: v for k, v in good.items() if k != "label"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(lacking) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        SUITE.load_tasks(tmp_path, "dev")
    assert str(path) in str(err.value) and "line 2" in str(err.value) and "label" in str(err.value)

    modification = dict(good, type=["UPDATE"], label=["UPDATE t SET c = '2'"])
    path.write_text(json.dumps(modification) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="answer_md5"):
        SUITE.load_tasks(tmp_path, "dev")

    bad_table = dict(
        good,
        table={"table_name": "t", "table_info": {"columns": [{"name": "c"}], "rows": [["1", "2"]]}},
    )
    path.write_text(json.dumps(bad_table) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 1: field table"):
        SUITE.load_tasks(tmp_path, "dev")


# -- the env contract ------------------------------------------------------------------------
@needs_data
def test_check_env_passes_on_dev_tasks(all_tasks: list[TaskSpec]) -> None:
    env = SUITE.make_env(DATA_ROOT)
    check_env(env, all_tasks[0])
    check_env(env, next(t for t in all_tasks if t.task_type == "INSERT"))
    check_env(env, all_tasks[0], junk_action="answer: []")  # a wrong answer terminates
    env.close()


def test_sql_steps_report_results_errors_and_empty_results() -> None:
    env = DBBenchEnv()
    observation, info = env.reset(_task("counting", ROWS, label=["1"]))
    assert observation == "q\nt" and info["admissible_actions"] is None
    result = env.step("sql: SELECT Nation FROM `Medal Table` WHERE Gold > 3 ORDER BY Nation")
    assert result.observation == "[('Norway',), ('Sweden',)]"  # numeric, as in MySQL
    assert not result.terminated and result.reward == 0.0 and result.info["sql_error"] is None
    result = env.step("sql: SELECT * FROM `Medal Table` WHERE Nation = 'montreal'")
    assert result.observation == "[('Montréal', '0')]"  # MySQL's accent/case-insensitive '='
    result = env.step("sql: SELECT Nation FROM `Medal Table` WHERE Gold > 100")
    assert result.observation == "[]" and result.info["empty_result"] is True
    result = env.step("sql: UPDATE `Medal Table` SET Gold = '1' WHERE Nation = 'Atlantis'")
    assert result.observation == "[]" and result.info["rows_affected"] == 0
    assert result.info["empty_result"] is False
    result = env.step("sql: SELEC nothing")
    assert result.observation.startswith("Error:") and "syntax error" in result.info["sql_error"]
    assert result.info["invalid_action"] is False
    result = env.step("xyzzy")
    assert result.info["invalid_action"] is True and not result.terminated
    result = env.step('answer: ["2"]')
    assert result.terminated and result.reward == 0.0 and result.info["success"] is False
    with pytest.raises(EnvError):
        env.step("sql: SELECT 1")


def test_runaway_sql_is_aborted_and_big_results_are_capped() -> None:
    env = DBBenchEnv()
    env.reset(_task("counting", [[f"n{i}", str(i)] for i in range(60)], label=["1"]))
    result = env.step(
        "sql: WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
        "SELECT count(*) FROM r"
    )
    assert result.info["sql_error"] and "budget" in result.observation
    result = env.step("sql: SELECT * FROM `Medal Table`")
    assert result.info["result_truncated"] and "[TRUNCATED]" in result.observation
    assert "('n49', '49')" in result.observation and "('n50', '50')" not in result.observation
    result = env.step("sql: ATTACH DATABASE '/tmp/x.db' AS x")
    assert result.info["sql_error"]


# -- AgentBench's success rule ---------------------------------------------------------------
def test_select_scoring_rule() -> None:
    assert answers_match(["3.005"], ["3.0"]) and not answers_match(["3.02"], ["3.0"])
    assert answers_match(["21000"], ["21000.0"]) and answers_match(["1,174"], ["1174.0"])
    assert answers_match(["Giza"], ["Giza"]) and not answers_match(["giza"], ["Giza"])
    assert answers_match(["b", "a", "a"], ["a", "b"]) and not answers_match(["a"], ["a", "b"])
    assert not answers_match(["a", "b", "c"], ["a", "b"])
    assert answers_match(["1.001", "x"], ["x", "1"]) and not answers_match(["1.5", "x"], ["x", "1"])
    assert answers_match([], ["none"]) and answers_match(["None"], ["none"])
    assert not answers_match(["0"], ["none"])
    assert parse_answer('["a", 2]') == ["a", "2"]
    assert parse_answer("[('a',), ('b',)]") == ["a", "b"]
    assert parse_answer(" Giza ") == ["Giza"] and parse_answer("") == []


def test_select_answers_through_the_env() -> None:
    env = DBBenchEnv()
    cases = [
        (["4.0"], 'answer: ["4.004"]', True),
        (["4.0"], "answer: 4", True),
        (["4.0"], 'answer: ["4.1"]', False),
        (["Norway"], "answer: Norway", True),
        (["Norway", "Sweden"], 'answer: ["Sweden", "Norway"]', True),
        (["Norway", "Sweden"], "answer: [('Sweden',), ('Norway',)]", True),
        (["Norway", "Sweden"], 'answer: ["Sweden"]', False),
    ]
    for label, action, success in cases:
        env.reset(_task("other", ROWS, label=label))
        result = env.step(action)
        assert result.terminated and result.info["success"] is success, (label, action)
        assert result.reward == (1.0 if success else 0.0)


def test_table_hash_matches_mysql_rule() -> None:
    rows: list[tuple[str | None, ...]] = [("a", None, "c"), ("x", "y", "z")]
    assert mysql_table_hash(rows) == f"[('{_reference_hash(rows)}',)]"
    many = [(f"row {i}", str(i)) for i in range(300)]  # 300 * 6 bytes > group_concat_max_len
    assert mysql_table_hash(many) == f"[('{_reference_hash(many)}',)]"
    untruncated = hashlib.md5(
        ",".join(
            sorted(hashlib.md5(f"row {i},{i}".encode()).hexdigest()[:5] for i in range(300))
        ).encode()
    ).hexdigest()
    assert untruncated not in mysql_table_hash(many)
    assert mysql_table_hash([]) == "[(None,)]"


@pytest.mark.parametrize(
    ("task_type", "good", "bad", "final"),
    [
        (
            "UPDATE",
            "UPDATE `Medal Table` SET Gold = '5' WHERE Nation = 'Norway'",
            "UPDATE `Medal Table` SET Gold = '6' WHERE Nation = 'Norway'",
            [("Norway", "5"), ("Sweden", "12"), ("Finland", "2.5"), ("Montréal", "0")],
        ),
        (
            "INSERT",
            "INSERT INTO `Medal Table` (Nation, Gold) VALUES ('Denmark', 1)",
            "INSERT INTO `Medal Table` (Nation) VALUES ('Denmark')",
            [*(tuple(r) for r in ROWS), ("Denmark", "1")],
        ),
    ],
)
def test_modification_tasks_score_the_table_hash(
    task_type: str, good: str, bad: str, final: list[tuple[str, ...]]
) -> None:
    expected = f"[('{_reference_hash(final)}',)]"
    env = DBBenchEnv()
    env.reset(_task(task_type, ROWS, label=[good], answer_md5=expected))
    assert env.step(f"sql: {good}").info["sql_error"] is None
    result = env.step("answer: done")
    assert result.info["success"] is True and result.reward == 1.0
    assert result.info["table_hash"] == expected
    env.reset(_task(task_type, ROWS, label=[good], answer_md5=expected))
    env.step(f"sql: {bad}")
    assert env.step("answer: done").info["success"] is False
    env.reset(_task(task_type, ROWS, label=[good], answer_md5=expected))
    assert env.step("answer: done").info["success"] is False  # nothing changed


# -- MySQL -> SQLite translation -------------------------------------------------------------
def test_mysql_translation() -> None:
    assert to_sqlite("SELECT a FROM t WHERE b > 5; DROP TABLE t") == (
        "SELECT a FROM t WHERE CAST(b AS REAL) > 5"
    )
    assert (
        to_sqlite("UPDATE t SET g = 2 WHERE r = 6")
        == "UPDATE t SET g = 2 WHERE CAST(r AS REAL) = 6"
    )
    assert to_sqlite("SELECT 'Don\\'t\\n' # note") == "SELECT 'Don''t\n'"
    assert to_sqlite("SELECT * FROM 1952_Grand_Prix") == "SELECT * FROM `1952_Grand_Prix`"
    assert to_sqlite("SELECT a / b FROM t") == "SELECT a * 1.0 / b FROM t"


# -- the prompter ----------------------------------------------------------------------------
def test_prompter_maps_model_text_to_actions() -> None:
    prompter = SUITE.prompter
    extract = prompter.extract_action
    operation = "I will look.\nAction: Operation\n```sql\nSELECT *\nFROM t;\n```\n"
    assert extract(operation, {}) == "sql: SELECT *\nFROM t;"
    assert extract('Action: Answer\nFinal Answer: ["7", "8"]', {}) == 'answer: ["7", "8"]'
    assert extract("```sql SELECT 1```", {}) == "sql: SELECT 1"
    assert extract("Let me check.\nSELECT COUNT(*) FROM t;", {}) == "sql: SELECT COUNT(*) FROM t;"
    assert extract("I am not sure what to do.", {}) == "I am not sure what to do."
    env = DBBenchEnv()
    env.reset(_task("other", ROWS, label=["Norway"]))
    junk = env.step(extract("I am not sure what to do.", {}))
    assert junk.info["invalid_action"] and not junk.terminated
    assert prompter.feedback_message(junk.observation, junk.info) == INVALID_FEEDBACK
    assert prompter.feedback_message("[('a',)]", {"invalid_action": False}) == "[('a',)]"
    task = _task("UPDATE", ROWS, label=["x"], answer_md5="[('0',)]")
    system = prompter.system_prompt(task)
    assert system.startswith("I will ask you a question, then you should help me operate a MySQL")
    assert 'Final Answer: ["ANSWER1", "ANSWER2", ...]' in system and "UPDATE `Stadiums`" in system
    assert "SELECT `Gold`" in prompter.system_prompt(_task("counting", ROWS, label=["1"]))
    assert prompter.first_message(task, "q\nt", {}) == "q\nt"


# -- gold replay over every task -------------------------------------------------------------
@needs_data
def test_gold_replay_reproduces_hashes_and_labels(all_tasks: list[TaskSpec]) -> None:
    """Replay the gold SQL in SQLite: hashes for INSERT/UPDATE, labels for SELECT-style tasks.

    The gold SQL is MySQL and often sloppy (missing spaces, unquoted names with spaces, labels
    taken from the source dataset rather than from the table), so only part of the SELECT
    golds reproduce; the thresholds sit just under what was measured (hash 140/140, select
    33/70 with the translation of sqltext and the collation of mysqlfuncs).
    """
    hash_ok = hash_total = select_ok = select_total = 0
    for task in all_tasks:
        payload = task.payload
        database = TaskDatabase(TableSpec.from_payload(payload["table"]))
        try:
            if is_modification(task.task_type):
                hash_total += 1
                database.execute(payload["label"][0])
                hash_ok += hashes_match(database.table_hash(), payload["answer_md5"])
            else:
                select_total += 1
                result = database.execute(payload["sql"]["query"])
                select_ok += result.rows is not None and answers_match(
                    rows_to_answer(result.rows), payload["label"]
                )
        finally:
            database.close()
    print(f"dbbench gold replay: hash {hash_ok}/{hash_total}, select {select_ok}/{select_total}")
    assert (hash_total, select_total) == (140, 70)
    assert hash_ok >= 138
    assert select_ok >= 31
