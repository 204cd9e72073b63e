"""How a chat model is told about a DBBench task, and how its reply becomes an action.

The system prompt is AgentBench's DBBench prompt (the classic text-protocol version, the one
with `Action: Operation` / `Action: Answer`), followed by one short worked example of the same
kind of task (query, INSERT, UPDATE or DELETE) on a made-up table, so that no task is leaked.
"""

from __future__ import annotations

import re
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import INFO_INVALID
from harness_r1.envs.dbbench.env import ANSWER_PREFIX, SQL_PREFIX, parse_action

AGENTBENCH_PROMPT = """I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer.
your operation should be like this:
Action: Operation
```sql
SELECT * FROM table WHERE condition;
```
You MUST put SQL in markdown format without any other comments. Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then write down:
Action: Answer
Final Answer: ["ANSWER1", "ANSWER2", ...]
DO NOT write this pattern unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
Your input will be raw MySQL response, you have to deal with it by yourself."""  # noqa: E501

_EXAMPLE_HEAD = "Here is an example on another table.\n"
_EXAMPLES: dict[str, str] = {
    "query": """User: How many gold medals did Norway win?
The name of this table is Medal Table, and the headers of this table are Nation,Gold,Silver,Bronze.
Agent: I need the Gold value of the row whose Nation is Norway.
Action: Operation
```sql
SELECT `Gold` FROM `Medal Table` WHERE `Nation` = 'Norway';
```
User: [('4',)]
Agent: The table says Norway won 4 gold medals.
Action: Answer
Final Answer: ["4"]""",
    "INSERT": """User: Add the stadium Lerkendal in Trondheim, capacity 21,400, to the table.
The name of this table is Stadiums, and the headers of this table are Stadium,City,Capacity.
Agent: I insert one row with the three values.
Action: Operation
```sql
INSERT INTO `Stadiums` (`Stadium`, `City`, `Capacity`) VALUES ('Lerkendal', 'Trondheim', '21,400');
```
User: []
Agent: The row is inserted.
Action: Answer
Final Answer: ["none"]""",
    "UPDATE": """User: Change the capacity of Ullevaal Stadion to 28,000.
The name of this table is Stadiums, and the headers of this table are Stadium,City,Capacity.
Agent: I update the Capacity of the row whose Stadium is Ullevaal Stadion.
Action: Operation
```sql
UPDATE `Stadiums` SET `Capacity` = '28,000' WHERE `Stadium` = 'Ullevaal Stadion';
```
User: []
Agent: The row is updated.
Action: Answer
Final Answer: ["none"]""",
    "DELETE": """User: Remove the stadiums located in Bergen.
The name of this table is Stadiums, and the headers of this table are Stadium,City,Capacity.
Agent: I delete the rows whose City is Bergen.
Action: Operation
```sql
DELETE FROM `Stadiums` WHERE `City` = 'Bergen';
```
User: []
Agent: The rows are deleted.
Action: Answer
Final Answer: ["none"]""",
}

INVALID_FEEDBACK = (
    "Your response did not match any pattern. Either write\n"
    "Action: Operation\n```sql\n<one SQL statement>\n```\n"
    'or\nAction: Answer\nFinal Answer: ["ANSWER1", "ANSWER2", ...]'
)

_ACTION_LINE = re.compile(r"Action\s*:\s*(Operation|Answer)\b", re.IGNORECASE)
_FENCE = re.compile(r"```(.*?)```", re.DOTALL)
_TAGGED = re.compile(r"[ \t]*([A-Za-z]+)[ \t]*(?:\n|$)(.*)", re.DOTALL)
_SQL_TAGS = ("sql", "mysql", "sqlite")
_FINAL = re.compile(r"Final\s+Answer\s*:[ \t]*(.*)", re.IGNORECASE)
_SQL_START = r"(?:SELECT|INSERT|UPDATE|DELETE|WITH|SHOW|DESCRIBE|DESC)\b"
_SQL_LINE = re.compile(rf"^[ \t]*({_SQL_START}.*)$", re.IGNORECASE | re.MULTILINE)
_SQL_BEGIN = re.compile(rf"\s*{_SQL_START}", re.IGNORECASE)


def _split_fence(inner: str) -> tuple[str, str]:
    """(language tag, body) of a fenced block: ```sql\n...```, ```sql ...``` or ```...```."""
    tagged = _TAGGED.match(inner)
    if tagged is not None and not _SQL_BEGIN.match(tagged.group(1)):
        return tagged.group(1).lower(), tagged.group(2).strip()
    head, _, rest = inner.strip().partition(" ")
    if head.lower() in _SQL_TAGS:
        return head.lower(), rest.strip()
    return "", inner.strip()


def _sql_fence(text: str) -> tuple[int, str] | None:
    """(position, SQL) of the first ```sql block, or of an untagged block holding SQL."""
    for match in _FENCE.finditer(text):
        language, body = _split_fence(match.group(1))
        if body and (language in _SQL_TAGS or (not language and _SQL_BEGIN.match(body))):
            return match.start(), body
    return None


def _final_answer(text: str) -> tuple[int, str] | None:
    match = _FINAL.search(text)
    if match is None:
        return None
    answer = match.group(1).strip()
    if not answer:  # the list on the next non-empty line
        rest = text[match.end() :].strip().splitlines()
        answer = rest[0].strip() if rest else ""
    return match.start(), answer


def _sql_line(text: str) -> str | None:
    match = _SQL_LINE.search(text)
    return match.group(1).strip() if match else None


class DBBenchPrompter:
    """TaskPrompter for DBBench (AgentBench's text protocol)."""

    def system_prompt(self, task: TaskSpec) -> str:
        kind = task.task_type if task.task_type in _EXAMPLES else "query"
        return f"{AGENTBENCH_PROMPT}\n\n{_EXAMPLE_HEAD}{_EXAMPLES[kind]}"

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return observation

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        if info.get(INFO_INVALID):
            return INVALID_FEEDBACK
        return observation

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        """`Action: Operation` + ```sql block -> `sql: ...`; `Final Answer: [...]` ->
        `answer: [...]`; without an Action line the earlier of the two wins, then a bare line
        starting with SELECT/INSERT/UPDATE/DELETE. Text already in action form passes through;
        junk is returned unchanged (the env answers it as an invalid action)."""
        text = raw_output if isinstance(raw_output, str) else ""
        if parse_action(text) is not None:
            return text.strip()
        fence = _sql_fence(text)
        final = _final_answer(text)
        action = _ACTION_LINE.search(text)
        if action is not None:
            wanted = action.group(1).lower()
            if wanted == "operation" and fence is not None:
                return f"{SQL_PREFIX} {fence[1]}"
            if wanted == "answer" and final is not None:
                return f"{ANSWER_PREFIX} {final[1]}"
        if fence is not None and (final is None or fence[0] < final[0]):
            return f"{SQL_PREFIX} {fence[1]}"
        if final is not None:
            return f"{ANSWER_PREFIX} {final[1]}"
        line = _sql_line(text)
        if line is not None:
            return f"{SQL_PREFIX} {line}"
        return text
