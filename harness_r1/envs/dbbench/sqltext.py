"""MySQL-flavoured SQL text -> one SQLite statement.

Why: AgentBench's DBBench runs on MySQL 8, its gold SQL is MySQL and the prompt tells the model
it talks to MySQL. We run SQLite in-process (no server, no container), so the MySQL-isms a model
or the gold data actually use are translated here, on a token stream (never inside string
literals). What is translated, and why each item keeps MySQL's meaning:

- Only the first statement runs (AgentBench: "I will only execute the first statement").
- String literals: MySQL backslash escapes (`\\'`, `\\n`, `\\t`, `\\\\`, ...) are decoded and the
  literal is re-emitted in SQLite quoting. `\\%` and `\\_` keep their backslash, as in MySQL,
  so LIKE (whose default escape character is a backslash in MySQL) sees them.
- Double-quoted text stays double-quoted: SQLite reads it as an identifier when such a column or
  table exists and as a string otherwise, which covers both MySQL's string use and the ANSI
  identifier use that models (and the gold SQL) write.
- `#` comments (MySQL) and `--`/`/* */` comments are dropped.
- Bare identifiers that start with a digit (`1952_British_Grand_Prix_0`, legal in MySQL) are
  back-quoted.
- `a / b` becomes `a * 1.0 / b`: MySQL's `/` never truncates, SQLite's integer division does.
- `col <op> <number>` (and `<number> <op> col`, `col BETWEEN n AND m`) becomes
  `CAST(col AS REAL) <op> <number>`: every column is TEXT (as in AgentBench), and MySQL compares
  a string with a number numerically, while SQLite would compare them as text ('45' < '198' is
  false in SQLite). CAST takes the numeric prefix, like MySQL's string-to-number conversion.
  Assignments (`SET col = 5`) are left alone.
- `&&` / `||` are MySQL's AND / OR; `SEPARATOR` inside GROUP_CONCAT becomes a comma.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IDENT_CHAR = re.compile(r"[0-9A-Za-z_$\u0080-\uffff]")
_WORD = re.compile(r"[A-Za-z_$\u0080-\uffff][0-9A-Za-z_$\u0080-\uffff]*")
_IDENT_RUN = re.compile(r"[0-9A-Za-z_$\u0080-\uffff]+")
_OPERATORS = ("<=>", "<=", ">=", "<>", "!=", "==", "||", "&&", "<<", ">>")
_MYSQL_ESCAPES = {
    "0": "\x00",
    "'": "'",
    '"': '"',
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    "\\": "\\",
    "%": "\\%",
    "_": "\\_",
}
_COMPARISONS = frozenset({"=", "==", "!=", "<>", "<", "<=", ">", ">="})
#: Words that can stand before a comparison operator but are not column references.
_KEYWORDS = frozenset(
    {
        "all",
        "and",
        "any",
        "as",
        "asc",
        "between",
        "by",
        "case",
        "collate",
        "current_date",
        "current_time",
        "current_timestamp",
        "desc",
        "distinct",
        "else",
        "end",
        "escape",
        "exists",
        "false",
        "from",
        "glob",
        "group",
        "having",
        "in",
        "is",
        "isnull",
        "join",
        "like",
        "limit",
        "match",
        "not",
        "notnull",
        "null",
        "offset",
        "on",
        "or",
        "order",
        "regexp",
        "select",
        "set",
        "some",
        "then",
        "true",
        "union",
        "values",
        "when",
        "where",
    }
)
#: Keywords that end an assignment zone (`SET a = 1, b = 2 WHERE ...`).
_ASSIGNMENT_END = frozenset({"where", "order", "limit", "returning"})


@dataclass(frozen=True)
class Token:
    """One lexical unit. `kind` is one of: ws, str, dq, bt, br, num, word, op, semi, raw."""

    kind: str
    text: str


class SqlTextError(ValueError):
    """The action holds no SQL statement at all."""


def _decode_mysql_string(body: str) -> str:
    """Decode MySQL escapes inside a quoted literal (quote doubling is handled by the lexer)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(_MYSQL_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _scan_quoted(sql: str, start: int, quote: str, backslash: bool) -> tuple[str, int] | None:
    """Return (raw body, index after the closing quote), or None when unterminated."""
    i = start + 1
    body: list[str] = []
    while i < len(sql):
        ch = sql[i]
        if backslash and ch == "\\" and i + 1 < len(sql):
            body.append(sql[i : i + 2])
            i += 2
            continue
        if ch == quote:
            if i + 1 < len(sql) and sql[i + 1] == quote:
                body.append(quote if not backslash else "\\" + quote)
                i += 2
                continue
            return "".join(body), i + 1
        body.append(ch)
        i += 1
    return None


def tokenize(sql: str) -> list[Token]:
    """Lex MySQL text into tokens already spelled the SQLite way (see the module docstring)."""
    tokens: list[Token] = []
    i = 0
    n = len(sql)
    while i < n:
        ch = sql[i]
        if ch.isspace():
            j = i
            while j < n and sql[j].isspace():
                j += 1
            tokens.append(Token("ws", sql[i:j]))
            i = j
        elif ch == "#" or sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
            tokens.append(Token("ws", " "))
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            tokens.append(Token("ws", " "))
        elif ch in "'\"":
            scanned = _scan_quoted(sql, i, ch, backslash=True)
            if scanned is None:
                tokens.append(Token("raw", sql[i:]))
                break
            body, i = scanned
            text = _decode_mysql_string(body)
            if ch == "'":
                tokens.append(Token("str", "'" + text.replace("'", "''") + "'"))
            else:
                tokens.append(Token("dq", '"' + text.replace('"', '""') + '"'))
        elif ch in "`[":
            close = "`" if ch == "`" else "]"
            j = sql.find(close, i + 1)
            while ch == "`" and j >= 0 and sql.startswith("``", j):
                j = sql.find("`", j + 2)
            if j < 0:
                tokens.append(Token("raw", sql[i:]))
                break
            tokens.append(Token("bt" if ch == "`" else "br", sql[i : j + 1]))
            i = j + 1
        elif ch.isdigit() or (ch == "." and i + 1 < n and sql[i + 1].isdigit()):
            match = _NUMBER.match(sql, i)
            assert match is not None
            end = match.end()
            if end < n and _IDENT_CHAR.match(sql, end) and "." not in match.group():
                run = _IDENT_RUN.match(sql, i)
                assert run is not None
                tokens.append(Token("bt", "`" + run.group() + "`"))
                i = run.end()
            else:
                tokens.append(Token("num", match.group()))
                i = end
        elif _WORD.match(sql, i):
            match = _WORD.match(sql, i)
            assert match is not None
            tokens.append(Token("word", match.group()))
            i = match.end()
        elif ch == ";":
            tokens.append(Token("semi", ";"))
            i += 1
        else:
            op = next((o for o in _OPERATORS if sql.startswith(o, i)), ch)
            tokens.append(Token("op", op))
            i += len(op)
    return tokens


def first_statement(tokens: list[Token]) -> list[Token]:
    """The tokens of the first non-empty statement (AgentBench executes only that one)."""
    current: list[Token] = []
    for token in tokens:
        if token.kind == "semi":
            if any(t.kind != "ws" for t in current):
                return current
            current = []
        else:
            current.append(token)
    return current


def _is_colref(token: Token) -> bool:
    if token.kind in ("bt", "br", "dq"):
        return True
    return token.kind == "word" and token.text.lower() not in _KEYWORDS


def _colref_start(sig: list[Token], end: int) -> int | None:
    """Index in `sig` where a (possibly qualified) column reference ending at `end` starts."""
    if end < 0 or not _is_colref(sig[end]):
        return None
    start = end
    while start >= 2 and sig[start - 1].text == "." and _is_colref(sig[start - 2]):
        start -= 2
    if start >= 1 and sig[start - 1].text == ".":
        return None
    return start


def _colref_end(sig: list[Token], start: int) -> int | None:
    """Index in `sig` where a column reference starting at `start` ends (None if not one)."""
    if start >= len(sig) or not _is_colref(sig[start]):
        return None
    end = start
    while end + 2 < len(sig) and sig[end + 1].text == "." and _is_colref(sig[end + 2]):
        end += 2
    if end + 1 < len(sig) and sig[end + 1].text in ("(", "."):
        return None
    return end


def _number_at(sig: list[Token], index: int) -> int | None:
    """If a (signed) number starts at `index`, the index of its last token."""
    if index < len(sig) and sig[index].kind == "num":
        return index
    if (
        index + 1 < len(sig)
        and sig[index].kind == "op"
        and sig[index].text in "+-"
        and sig[index + 1].kind == "num"
    ):
        return index + 1
    return None


def _numeric_before(sig: list[Token], end: int) -> bool:
    """Whether the operand left of a comparison ends in a number (`5 < col`)."""
    return end >= 0 and sig[end].kind == "num"


def _cast_spans(sig: list[Token]) -> list[tuple[int, int]]:
    """Spans (inclusive, in `sig`) of column references compared with a number."""
    spans: list[tuple[int, int]] = []
    depth = 0
    assign_depth: int | None = None
    for k, token in enumerate(sig):
        low = token.text.lower() if token.kind == "word" else ""
        if token.text == "(" and token.kind == "op":
            depth += 1
        elif token.text == ")" and token.kind == "op":
            depth -= 1
            if assign_depth is not None and depth < assign_depth:
                assign_depth = None
        elif low in ("set", "duplicate"):
            assign_depth = depth
        elif low in _ASSIGNMENT_END and assign_depth is not None and depth == assign_depth:
            assign_depth = None
        if assign_depth is not None:
            continue
        is_between = low == "between" and _number_at(sig, k + 1) is not None
        if not ((token.kind == "op" and token.text in _COMPARISONS) or is_between):
            continue
        left = _colref_start(sig, k - 1)
        if left is not None and _number_at(sig, k + 1) is not None:
            spans.append((left, k - 1))
        elif not is_between and _numeric_before(sig, k - 1):
            right = _colref_end(sig, k + 1)
            if right is not None:
                spans.append((k + 1, right))
    return spans


def _rewrite(statement: list[Token]) -> str:
    sig_positions = [i for i, t in enumerate(statement) if t.kind != "ws"]
    sig = [statement[i] for i in sig_positions]
    opens: dict[int, int] = {}
    closes: dict[int, int] = {}
    for start, end in _cast_spans(sig):
        opens[sig_positions[start]] = opens.get(sig_positions[start], 0) + 1
        closes[sig_positions[end]] = closes.get(sig_positions[end], 0) + 1
    parts: list[str] = []
    for index, token in enumerate(statement):
        parts.append("CAST(" * opens.get(index, 0))
        if token.kind == "op" and token.text == "/":
            parts.append("* 1.0 /")
        elif token.kind == "op" and token.text in ("&&", "||"):
            parts.append(" AND " if token.text == "&&" else " OR ")
        elif token.kind == "word" and token.text.lower() == "separator":
            parts.append(",")
        else:
            parts.append(token.text)
        parts.append(" AS REAL)" * closes.get(index, 0))
    return "".join(parts).strip()


def to_sqlite(sql: str) -> str:
    """Translate MySQL text to one SQLite statement. Raises SqlTextError when there is none."""
    statement = first_statement(tokenize(sql))
    text = _rewrite(statement)
    if not text:
        raise SqlTextError("no SQL statement given")
    return text


def statement_words(sql: str) -> list[str] | None:
    """The first statement as a list of words / quoted names, or None if it holds anything else.

    Used to recognise the MySQL-only statements (SHOW TABLES, DESCRIBE t, ...) that are answered
    without SQLite.
    """
    words: list[str] = []
    for token in first_statement(tokenize(sql)):
        if token.kind == "ws":
            continue
        if token.kind not in ("word", "bt", "br", "dq", "str"):
            return None
        words.append(token.text)
    return words


def unquote_identifier(text: str) -> str:
    """`name`, [name], "name" or 'name' -> name (as written in SHOW COLUMNS FROM / DESCRIBE)."""
    if len(text) >= 2 and text[0] in "`[\"'":
        close = {"`": "`", "[": "]", '"': '"', "'": "'"}[text[0]]
        if text[-1] == close:
            return text[1:-1].replace(close * 2, close)
    return text
