"""DBBench templates: skills per task type, a first exploratory SELECT, vetoes of repeated SQL,
hints on SQL errors and empty results, prose answers rewritten into `answer: [...]`, and
finishing a modification or a single-cell lookup with an answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_r1.contracts import HookName
from harness_r1.trainer.templates.base import (
    MODIFICATION_TYPES,
    ChoiceParam,
    Features,
    IntParam,
    RenderContext,
    Template,
    fill,
    lit,
)

ENVS = frozenset({"dbbench"})
TABLE_RE = r"The name of this table is (.+?), and the headers of this table are (.+?)\.?\s*$"

#: "The answer is: X", "the answer to this question is X", "Final Answer: X", "answer: X".
ANSWER_RE = r"\banswer\b[^:\n]{0,30}?\bis\b\s*:?|\banswer\s*:"

#: Skills per DBBench task type (query types share the generic query skill).
QUERY_SKILL = (
    "Run one SELECT on the table that filters by the values the question quotes and returns "
    "the column it asks for; then answer with the cell values exactly as the table writes them."
)
AGGREGATE_SKILL = (
    "Compute the value with SQL (COUNT, SUM, MIN, MAX or AVG over the rows the question "
    "selects) and answer with the number the query returns."
)
SKILLS: dict[str, str] = {
    "INSERT": (
        "Write one INSERT INTO `table` (`col`, ...) VALUES (...) with every value the question "
        "gives, run it, then answer with an empty list."
    ),
    "UPDATE": (
        "Write one UPDATE `table` SET `col` = 'value' WHERE `key` = 'value' that changes only the "
        "rows the question names, run it, then answer with an empty list."
    ),
    "DELETE": (
        "Write one DELETE FROM `table` WHERE ... that removes only the rows the question names, "
        "run it, then answer with an empty list."
    ),
    "counting": "Count with SELECT COUNT(*) FROM `table` WHERE ... and answer with the number.",
    "ranking": (
        "Order the rows with ORDER BY `col` DESC (or ASC) LIMIT 1 and answer with the cell the "
        "question asks for."
    ),
    "comparison": QUERY_SKILL,
    "other": QUERY_SKILL,
}
BACKTICK_TIP = (
    "Quote table and column names with backticks and text values with single quotes, e.g. "
    "SELECT `Notes` FROM `My Table` WHERE `Method` = 'decision'."
)
REPEAT_SQL_MESSAGES = (
    "You already ran that exact SQL. Change the query or give the final answer.",
    "Same SQL as before: the result will not change. Use what it returned to answer.",
)
EMPTY_HINTS = {
    "like": (
        "No rows matched. The WHERE values may be spelt differently: try LIKE '%value%' on the "
        "text columns or drop one condition."
    ),
    "distinct": (
        "No rows matched. Look at the real values first, e.g. SELECT DISTINCT `col` FROM "
        "`table` LIMIT 20, then fix the WHERE clause."
    ),
}


def _skill_for(task_type: str) -> str:
    if task_type.startswith("aggregation"):
        return AGGREGATE_SKILL
    return SKILLS.get(task_type, QUERY_SKILL)


def _skills(p: Mapping[str, Any], rc: RenderContext) -> str:
    types = list(rc.task_types) or ["other", "INSERT", "UPDATE"]
    table = {t: _skill_for(t) for t in types}
    lines = [
        '    """Skills per task type (the types the packet showed failing)."""',
        f"    table = {lit(table)}",
        '    kind = ctx["task"]["task_type"]',
        f"    skills = [table.get(kind, {lit(QUERY_SKILL)})]",
    ]
    if p["backticks"]:
        lines.append(f"    skills.append({lit(BACKTICK_TIP)})")
    if p["name_table"]:
        lines += [
            f'    m = re.search(r"{TABLE_RE}", ctx["task"]["instruction"].strip())',
            "    if m:",
            '        cols = ", ".join("`" + h + "`" for h in m.group(2).split(",") if h)',
            '        table = "The table is `" + m.group(1) + "`; its columns are " + cols + "."',
            "        skills.append(table)",
        ]
    lines.append('    return {"skills": skills}')
    return "def @@fn@@(ctx, state):\n" + "\n".join(lines)


def _explore_first(p: Mapping[str, Any], rc: RenderContext) -> str:
    skip = ""
    if p["only_queries"]:
        skip = (
            f'    if ctx["task"]["task_type"] in {lit(list(MODIFICATION_TYPES))}:\n'
            "        return None\n"
        )
    code = '''
def @@fn@@(ctx, state):
    """First step: look at a few rows of the table before writing the real query."""
    if state.get("explored"):
        return None
    state["explored"] = True
@@skip@@    m = re.search(r"@@table_re@@", ctx["task"]["instruction"].strip())
    if not m:
        return None
    table = m.group(1).replace("`", "")
    return {"effect": "force", "text": "sql: SELECT * FROM `" + table + "` LIMIT @@limit@@"}
'''
    return fill(code, skip=skip, table_re=TABLE_RE, limit=str(p["limit"]))


def _lookup(p: Mapping[str, Any], rc: RenderContext) -> str:
    columns = "named" if p["columns"] == "named" else "heads"
    code = '''
def @@fn@@(ctx, state):
    """First step of a question: select the columns it names from the rows it quotes."""
    if state.get("explored") or ctx["task"]["task_type"] in @@types@@:
        return None
    m = re.search(r"@@table_re@@", ctx["task"]["instruction"].strip())
    if not m:
        return None
    question = ctx["task"]["instruction"][: m.start()].lower()
    heads = [h for h in m.group(2).split(",") if h]
    named = [h for h in heads if len(h) > 1 and h.lower() in question]
    if len(named) < 2:
        return None
    quoted = ["`" + h.replace("`", "") + "`" for h in @@columns@@]
    text = question.replace("'", "''")
    tests = [
        "(length(" + q + ") >= @@min_chars@@ AND instr('" + text + "', lower(" + q + ")) > 0)"
        for q in ["`" + h.replace("`", "") + "`" for h in named]
    ]
    table = "`" + m.group(1).replace("`", "") + "`"
    sql = "SELECT " + ", ".join(quoted) + " FROM " + table + " WHERE " + " OR ".join(tests)
    state["explored"] = True
    return {"effect": "force", "text": "sql: " + sql}
'''
    return fill(
        code,
        types=lit(list(MODIFICATION_TYPES)),
        table_re=TABLE_RE,
        columns=columns,
        min_chars=str(p["min_chars"]),
    )


def _veto_sql(p: Mapping[str, Any], rc: RenderContext) -> str:
    key = '" ".join(proposed.lower().split())' if p["normalise"] else "proposed"
    code = '''
def @@fn@@(ctx, state):
    """Veto an SQL statement that was already run in this episode."""
    proposed = ctx["proposed_action"].strip()
    if not proposed.lower().startswith("sql:"):
        return None
    key = @@key@@
    seen = state.get("sql_seen", [])
    if key in seen:
        return {"effect": "veto", "text": @@message@@}
    state["sql_seen"] = (seen + [key])[-20:]
    return None
'''
    return fill(code, key=key, message=lit(REPEAT_SQL_MESSAGES[p["message"]]))


def _error_hint(p: Mapping[str, Any], rc: RenderContext) -> str:
    lines = [
        '    """On an SQL error: quote names with backticks (and show the columns)."""',
        '    error = ctx["info"].get("sql_error")',
        "    if not error:",
        "        return None",
        '    text = "The SQL failed"',
    ]
    if p["show_error"]:
        lines.append('    text += " (" + str(error)[:120] + ")"')
    lines.append(
        '    text += ". Quote table and column names with backticks and text values with single '
        'quotes."'
    )
    if p["list_columns"]:
        lines += [
            f'    m = re.search(r"{TABLE_RE}", ctx["task"]["instruction"].strip())',
            "    if m:",
            '        cols = ", ".join("`" + h + "`" for h in m.group(2).split(",") if h)',
            '        text += " Table: `" + m.group(1) + "`; columns: " + cols + "."',
        ]
    lines.append("    return text")
    return "def @@fn@@(ctx, state):\n" + "\n".join(lines)


def _empty_hint(p: Mapping[str, Any], rc: RenderContext) -> str:
    code = '''
def @@fn@@(ctx, state):
    """When a query returns no rows, suggest how to find the real values."""
    if not ctx["info"].get("empty_result") or ctx["info"].get("sql_error"):
        return None
    return @@hint@@
'''
    return fill(code, hint=lit(EMPTY_HINTS[p["suggest"]]))


def _answer_rewrite(p: Mapping[str, Any], rc: RenderContext) -> str:
    bare = "proposed if len(proposed.split()) <= " + str(p["bare_words"]) + ' else ""'
    split = (
        '[v.strip().strip("\\"\'") for v in value.split(",")]' if p["split_commas"] else "[value]"
    )
    skip = ""
    if p["skip_modification"]:
        skip = (
            f'    if ctx["task"]["task_type"] in {lit(list(MODIFICATION_TYPES))}:\n'
            "        return None\n"
        )
    code = '''
def @@fn@@(ctx, state):
    """Turn a prose answer ("The answer is X") into answer: ["X"]."""
    proposed = ctx["proposed_action"].strip()
    low = proposed.lower()
    if not proposed or low.startswith("sql:") or low.startswith("answer:"):
        return None
@@skip@@    m = re.search(r"@@answer_re@@", proposed, re.I)
    rest = proposed[m.end():] if m else @@bare@@
    lines = [line.strip(" `*\t") for line in rest.splitlines()]
    lines = [line for line in lines if line and not line.lower().startswith("the answer")]
    value = lines[0].rstrip(".").strip() if lines else ""
    if not value or "ANSWER1" in value:
        return None
    if value.startswith("["):
        return {"effect": "rewrite", "text": "answer: " + value}
    items = [v for v in @@split@@ if v]
    quoted = ", ".join("\\"" + v.replace("\\"", "") + "\\"" for v in items)
    return {"effect": "rewrite", "text": "answer: [" + quoted + "]"}
'''
    return fill(code, bare=bare, split=split, skip=skip, answer_re=ANSWER_RE)


def _finish_modification(p: Mapping[str, Any], rc: RenderContext) -> str:
    none_changed = (
        '        return "The statement changed no rows: check the WHERE values and run it again."'
        if p["require_rows"]
        else '        return {"effect": "force", "text": "answer: []"}'
    )
    code = '''
def @@fn@@(ctx, state):
    """After a successful INSERT/UPDATE/DELETE on a modification task, commit the answer."""
    if ctx["task"]["task_type"] not in @@types@@:
        return None
    action = ctx["action"].strip()
    if not action.lower().startswith("sql:") or ctx["info"].get("sql_error"):
        return None
    words = action[4:].split()
    if not words or words[0].upper() not in @@types@@:
        return None
    if ctx["info"].get("rows_affected") == 0:
@@none_changed@@
    return {"effect": "force", "text": "answer: []"}
'''
    return fill(code, types=lit(list(MODIFICATION_TYPES)), none_changed=none_changed)


def _commit_result(p: Mapping[str, Any], rc: RenderContext) -> str:
    drop = ""
    if p["skip_question_values"]:
        drop = (
            '    question = ctx["task"]["instruction"].lower()\n'
            "    kept = [v for v in values if v.lower() not in question]\n"
            "    values = kept or values\n"
        )
    code = '''
def @@fn@@(ctx, state):
    """A SELECT of named columns that returned a few cells: answer with them."""
    if ctx["task"]["task_type"] in @@types@@:
        return None
    action, info = ctx["action"].strip(), ctx["info"]
    if not action.lower().startswith("sql:") or info.get("sql_error") or info.get("empty_result"):
        return None
    statement = action[4:].strip()
    if not re.match(r"(?i)select\\s", statement) or "*" in statement.lower().split(" from ")[0]:
        return None
    if info.get("result_truncated"):
        return None
    rows = re.findall(r"\\(([^()]*)\\)", ctx["feedback"])
    if not rows:
        return None
    shown = @@shown@@
    cells = re.findall(r"'((?:[^'\\\\]|\\\\.)*)'|\\"([^\\"]*)\\"|(-?\\d+(?:\\.\\d+)?)", shown)
    values = [a or b or c for a, b, c in cells]
    if not values or len(values) > @@max_cells@@:
        return None
@@drop@@    quoted = ", ".join("\\"" + v.replace("\\"", "") + "\\"" for v in values)
    return {"effect": "force", "text": "answer: [" + quoted + "]"}
'''
    shown = "rows[0]" if p["first_row"] else 'ctx["feedback"]'
    return fill(
        code,
        types=lit(list(MODIFICATION_TYPES)),
        max_cells=str(p["max_cells"]),
        drop=drop,
        shown=shown,
    )


def _modification(f: Features) -> float:
    return f["modification"]


def _query(f: Features) -> float:
    return f["query"]


TEMPLATES: tuple[Template, ...] = (
    Template(
        name="db_skills",
        role="advisory",
        hook=HookName.EPISODE_START,
        envs=ENVS,
        params=(
            ChoiceParam("backticks", (True, False), True, "add the backtick quoting tip"),
            ChoiceParam("name_table", (True, False), True, "name the table and its columns"),
        ),
        build=_skills,
        weights={"always": 0.5, "wrong_end": 0.5, "sql_errors": 0.3},
        purpose="give the model the SQL recipe of each failing task type",
        composable=False,
        steer=lambda f: {"backticks": True, "name_table": f["sql_errors"] > 0},
    ),
    Template(
        name="db_explore_first",
        role="solver",
        hook=HookName.PRE_ACTION,
        envs=ENVS,
        params=(
            IntParam("limit", 1, 20, 5, "rows the first SELECT shows"),
            ChoiceParam("only_queries", (True, False), True, "skip INSERT/UPDATE/DELETE tasks"),
        ),
        build=_explore_first,
        weights={"wrong_end": 0.4, "empty_sql": 1.0, "sql_errors": 0.5},
        purpose="make the first step a SELECT * ... LIMIT k so the model sees real values",
        order=10,
        gate=_query,
        steer=lambda f: {"limit": 3 if f["empty_sql"] >= 0.5 else 5},
    ),
    Template(
        name="db_lookup_first",
        role="solver",
        hook=HookName.PRE_ACTION,
        envs=ENVS,
        params=(
            ChoiceParam("columns", ("named", "all"), "named", "columns the lookup selects"),
            IntParam("min_chars", 1, 5, 3, "shortest cell matched against the question"),
        ),
        build=_lookup,
        weights={"wrong_end": 0.8, "step_limit": 0.8, "invalid": 0.6, "sql_errors": 0.6},
        purpose="make the first step a SELECT of the columns the question names, on the rows "
        "whose cells the question quotes",
        order=8,
        gate=_query,
        partners=("db_commit_result",),
    ),
    Template(
        name="db_veto_repeat_sql",
        role="advisory",
        hook=HookName.PRE_ACTION,
        envs=ENVS,
        params=(
            ChoiceParam("normalise", (True, False), True, "compare ignoring case and spaces"),
            IntParam("message", 0, len(REPEAT_SQL_MESSAGES) - 1, 0, "which veto message"),
        ),
        build=_veto_sql,
        weights={"repeated": 2.0, "loops": 1.0},
        purpose="veto SQL that was already run and ask for a change or the answer",
        order=30,
    ),
    Template(
        name="db_sql_error_hint",
        role="advisory",
        hook=HookName.POST_FEEDBACK,
        envs=ENVS,
        params=(
            ChoiceParam("show_error", (True, False), True, "repeat the error message"),
            ChoiceParam("list_columns", (True, False), True, "list the table's columns"),
        ),
        build=_error_hint,
        weights={"sql_errors": 2.5},
        purpose="tell the model to quote names with backticks right after an SQL error",
        order=30,
    ),
    Template(
        name="db_empty_result_hint",
        role="advisory",
        hook=HookName.POST_FEEDBACK,
        envs=ENVS,
        params=(ChoiceParam("suggest", ("like", "distinct"), "distinct", "what to try"),),
        build=_empty_hint,
        weights={"empty_sql": 2.5},
        purpose="suggest how to find the real values when a query returns no rows",
        order=35,
    ),
    Template(
        name="db_answer_rewrite",
        role="advisory",
        hook=HookName.PRE_ACTION,
        envs=ENVS,
        params=(
            IntParam("bare_words", 0, 6, 3, "a bare reply this short is taken as the answer"),
            ChoiceParam("split_commas", (True, False), False, "one item per comma"),
            ChoiceParam("skip_modification", (True, False), True, "leave modification tasks"),
        ),
        build=_answer_rewrite,
        weights={"prose_answer": 2.5, "invalid": 1.2},
        purpose='rewrite prose such as "The answer is X" into answer: ["X"]',
        order=22,
    ),
    Template(
        name="db_finish_modification",
        role="solver",
        hook=HookName.POST_FEEDBACK,
        envs=ENVS,
        params=(
            ChoiceParam("require_rows", (True, False), True, "hint instead when no row changed"),
        ),
        build=_finish_modification,
        weights={"step_limit": 1.5, "always": 0.3},
        purpose="commit answer: [] right after a successful INSERT/UPDATE/DELETE",
        order=10,
        gate=_modification,
    ),
    Template(
        name="db_commit_result",
        role="solver",
        hook=HookName.POST_FEEDBACK,
        envs=ENVS,
        params=(
            IntParam("max_cells", 1, 6, 2, "the most cells committed as the answer"),
            ChoiceParam("skip_question_values", (True, False), True, "drop cells the question has"),
            ChoiceParam("first_row", (True, False), True, "answer from the first row only"),
        ),
        build=_commit_result,
        weights={"step_limit": 1.0, "wrong_end": 0.2},
        purpose="answer with the cells a targeted SELECT returned instead of running out of steps",
        order=12,
        gate=_query,
    ),
)
