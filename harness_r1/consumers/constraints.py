"""What a task requires (constraints) and how ids are masked, for failure packets.

Constraints are extracted simply from the instruction (and the task type), one short line each:
- webshop: `price < X dollars` from WebShop's own clause "price lower than X dollars", then
  `option: ...` for requested options phrased the usual ways, in order of appearance: colors
  ("in the color redwood", "and color patent-beige": one or two words after "color"; "mn4
  color": the word before it) as `color X`; "size 5" / "size: x-large" as `size X`; bare
  clothing sizes ("xx-large"); "pack of N"; dimensions ("100x45x45cm", `20"x20"`, "18 x 18
  inch"); quantities with a unit ("6.76 fl oz", "60 capsules", "3 foot", "25+ hours", "12
  pack", "20m"). Free-text options ("double horn") are not guessed: the instruction carries them.
- dbbench: from the task type, `statement: SELECT-style query (answer with values; type T)` or
  `statement: INSERT|UPDATE|DELETE (modify the table; the table itself is scored)`; then
  `table: NAME` and `columns: A,B,...` from "The name of this table is NAME, and the headers of
  this table are A,B,...".
- alfworld: `goal: <the goal sentence>` (the instruction is the game's goal sentence).
- any other env: none.

Masking: entity names (products, tables, objects) are task content and stay; identifiers go.
Each text of a packet is passed through `IdMasker`, which replaces, at word boundaries:
- every task_id of the batch (and each '/'-separated part of it, e.g. ALFWorld's game directory
  and trial) by the task's alias (T1, T2... in selection order) or "[task]" if not selected;
- every trajectory_id of the batch by "[episode]";
- for webshop, product ASINs (`B0` + 8 letters/digits, any case) by ASIN-1, ASIN-2... in order
  of first appearance in the packet (consistent within the packet, meaningless outside it).
Ids shorter than 4 characters are not substituted (they would corrupt ordinary numbers and
words; hooks never see task ids anyway, only instruction and task type).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MODIFICATION_TYPES = frozenset({"INSERT", "UPDATE", "DELETE"})  # as envs/dbbench/scoring.py
MIN_MASKED_ID = 4

_PRICE = re.compile(r"price lower than (\d+(?:\.\d+)?) dollars", re.IGNORECASE)
_STOP = r"(?:and|with|that|for|in|which|to|from|of|is|it|the|a|an|any|one|this|same)"
_WORD = r"[a-z0-9][\w\-+'.]*"
_UNIT = r"(?:\"|”|cm|mm|inch(?:es)?|in\b|ft)"
# (pattern, prefix): with a prefix the option is prefix + group 1 (colors read "color X" whichever
# side of the word "color" they stand, sizes "size X"); without, the matched text itself.
_OPTION_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            rf"(?:^|,|\b(?:in|the|and|with|choose|select|want|prefer))\s*colou?r\s*:?\s+"
            rf"(?:of\s+)?((?!{_STOP}(?:\s|$)){_WORD}(?:\s+(?!{_STOP}(?:\s|$)){_WORD})?)"
        ),
        "color ",
    ),
    (re.compile(rf"\b((?!{_STOP}(?:\s|$)|colou?r\b){_WORD})\s+colou?r\b"), "color "),
    (re.compile(r"\bsize\s*:?\s+(\w*\d[\w.\-]*|x*-?(?:small|medium|large))\b"), "size "),
    (re.compile(r"(?<![\w-])((?:x{1,3}-)?(?:small|large)|x{1,3}l|medium)(?![\w-])"), ""),
    (re.compile(r"\bpack of \d+"), ""),
    (
        re.compile(
            rf"\b\d+(?:\.\d+)?\s*{_UNIT}?\s*x\s*\d+(?:\.\d+)?\s*{_UNIT}?"
            rf"(?:\s*x\s*\d+(?:\.\d+)?\s*{_UNIT}?)?"
        ),
        "",
    ),
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\+?\s*(?:fl\.? oz|fluid ounces?|oz|ounces?|count|pcs|pieces|pack|"
            r"capsules|tablets|inch(?:es)?|foot|feet|ft|cm|mm|ml|liters?|lbs?|pounds?|hours?|gb|"
            r"tb|watts?)(?![\w])"
        ),
        "",
    ),
    (re.compile(r"\b\d+(?:\.\d+)?m\b"), ""),
)
_DB_TABLE = re.compile(
    r"The name of this table is (?P<table>.+?), and the headers of this table are "
    r"(?P<headers>.+?)\.?\s*$",
    re.DOTALL,
)
_ASIN = re.compile(r"(?<![A-Za-z0-9])B0[A-Za-z0-9]{8}(?![A-Za-z0-9])", re.IGNORECASE)


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" ,.;()")


def webshop_constraints(instruction: str) -> list[str]:
    out: list[str] = []
    price = _PRICE.search(instruction)
    if price:
        out.append(f"price < {price.group(1)} dollars")
    body = _PRICE.sub("", instruction).lower()
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern, prefix in _OPTION_PATTERNS:
        for match in pattern.finditer(body):
            start, end = match.span()
            if any(start < b and a < end for a, b in taken):
                continue  # overlaps an option already found (e.g. "size 5" then "5 ...")
            taken.append((start, end))
            text = match.group(1) if prefix else match.group(0)
            found.append((start, prefix + _clean(text)))
    seen: set[str] = set()
    for _, option in sorted(found):
        if option and option not in seen:
            seen.add(option)
            out.append(f"option: {option}")
    return out


def dbbench_constraints(task_type: str, instruction: str) -> list[str]:
    if task_type in MODIFICATION_TYPES:
        out = [f"statement: {task_type} (modify the table; the table itself is scored)"]
    else:
        out = [f"statement: SELECT-style query (answer with values; type {task_type})"]
    match = _DB_TABLE.search(instruction)
    if match:
        out.append(f"table: {_clean(match.group('table'))}")
        out.append(f"columns: {_clean(match.group('headers'))}")
    return out


def task_constraints(env: str, task_type: str, instruction: str) -> list[str]:
    """What the task requires, one short line each (rules in the module docstring)."""
    if env == "webshop":
        return webshop_constraints(instruction)
    if env == "dbbench":
        return dbbench_constraints(task_type, instruction)
    if env == "alfworld":
        goal = _clean(instruction)
        return [f"goal: {goal}"] if goal else []
    return []


class IdMasker:
    """Replaces batch ids in packet texts; stateful only for the ASIN aliases it hands out."""

    def __init__(
        self,
        env: str,
        task_aliases: dict[str, str],
        all_task_ids: Iterable[str],
        trajectory_ids: Iterable[str],
    ) -> None:
        replacements: dict[str, str] = {}
        for task_id in sorted(set(all_task_ids)):
            alias = task_aliases.get(task_id, "[task]")
            for part in (task_id, *task_id.split("/")):
                # a full id wins over a part that happens to equal another task's id
                if len(part) >= MIN_MASKED_ID and (part == task_id or part not in replacements):
                    replacements[part] = alias
        for trajectory_id in sorted(set(trajectory_ids)):
            if len(trajectory_id) >= MIN_MASKED_ID:
                replacements[trajectory_id] = "[episode]"
        self._replacements = replacements
        # longest first so an id never loses to one of its own substrings
        keys = sorted(replacements, key=lambda k: (-len(k), k))
        self._pattern = (
            re.compile(
                r"(?<![A-Za-z0-9_])(?:"
                + "|".join(re.escape(k) for k in keys)
                + r")(?![A-Za-z0-9_])"
            )
            if keys
            else None
        )
        self._mask_asins = env == "webshop"
        self.asin_aliases: dict[str, str] = {}

    def _asin(self, match: re.Match[str]) -> str:
        key = match.group(0).upper()
        alias = self.asin_aliases.get(key)
        if alias is None:
            alias = f"ASIN-{len(self.asin_aliases) + 1}"
            self.asin_aliases[key] = alias
        return alias

    def __call__(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: self._replacements[m.group(0)], text)
        if self._mask_asins:
            text = _ASIN.sub(self._asin, text)
        return text
