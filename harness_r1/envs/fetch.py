"""Get the official benchmark files and lay them out as the data root expects
(`harness-r1 data fetch ENV`).

Two halves, so the layout can be tested (and used) without a network:
- `download(url, dest)`: one streamed HTTP GET into a file, written atomically.
- `layout_*`: pure functions from local official files to the data-root layout:
    alfworld/<split>/<game>/<trial>/game.tw-pddl
    dbbench/dev.jsonl, dbbench/standard_even.jsonl
    webshop/goals_fixed_0_59.json, webshop/human_goals.json, webshop/goal_query_map.json
`fetch(env, data_root)` downloads an env's `SOURCES` into a cache directory and lays them out.

Where the official files live (`SOURCES`, each with the place its address was read from):
- ALFWorld: the `game.tw-pddl` files that alfworld 0.4.x plays are the release asset
  `json_2.1.2_tw-pddl.zip` of ALFWorld release 0.4.0 (the `TW_PDDL_FILES_URL` of the
  `alfworld-download` script shipped with alfworld 0.4.2). Its games sit under
  `json_2.1.1/<split>/<game>/<trial>/` like the rest of the ALFWorld json_2.1.1 data; the
  splits are `train`, `valid_seen`, `valid_unseen` and keep their names. As ALFWorld's own
  loader does, paths containing 'movable' or 'Sliced' are left out (unsolvable games are left
  in the files and skipped when tasks are listed).
  Note: the shared benchmark copy's `valid_train` (200 games) and its 900-game `train` sample
  are selections made for this project; the official archive gives the full splits.
- DBBench: AgentBench's `data/dbbench/dev.jsonl` and `data/dbbench/standard.jsonl`;
  `standard_even.jsonl` is every other row of `standard.jsonl` starting with the first (rows 0,
  2, 4, ...: 150 of 300), each line kept byte for byte.
- WebShop: ExpeL's `data/webshop/webshop.fixed100.json` (its first 60 goals, `fixed_0` to
  `fixed_59`, written as `goals_fixed_0_59.json` with the same JSON formatting as the shared
  copy) and WebShop's `baseline_models/data/human_goals.json` and `goal_query_map.json`,
  copied unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from harness_r1.envs.data import DataError


class FetchError(RuntimeError):
    """A download failed (HTTP error, network error, empty body)."""


@dataclass(frozen=True)
class Source:
    """One official file: where to get it, and where its address was found."""

    env: str
    filename: str
    url: str
    found_in: str


SOURCES: dict[str, tuple[Source, ...]] = {
    "alfworld": (
        Source(
            "alfworld",
            "json_2.1.2_tw-pddl.zip",
            "https://github.com/alfworld/alfworld/releases/download/0.4.0/json_2.1.2_tw-pddl.zip",
            "alfworld 0.4.2, scripts/alfworld-download (TW_PDDL_FILES_URL)",
        ),
    ),
    "dbbench": (
        Source(
            "dbbench",
            "dev.jsonl",
            "https://raw.githubusercontent.com/THUDM/AgentBench/main/data/dbbench/dev.jsonl",
            "github.com/THUDM/AgentBench, data/dbbench/dev.jsonl",
        ),
        Source(
            "dbbench",
            "standard.jsonl",
            "https://raw.githubusercontent.com/THUDM/AgentBench/main/data/dbbench/standard.jsonl",
            "github.com/THUDM/AgentBench, data/dbbench/standard.jsonl",
        ),
    ),
    "webshop": (
        Source(
            "webshop",
            "webshop.fixed100.json",
            "https://raw.githubusercontent.com/LeapLabTHU/ExpeL/main/data/webshop/webshop.fixed100.json",
            "github.com/LeapLabTHU/ExpeL, data/webshop/webshop.fixed100.json",
        ),
        Source(
            "webshop",
            "human_goals.json",
            "https://raw.githubusercontent.com/princeton-nlp/WebShop/master/baseline_models/data/human_goals.json",
            "github.com/princeton-nlp/WebShop, baseline_models/data (train_search_il.py reads it)",
        ),
        Source(
            "webshop",
            "goal_query_map.json",
            "https://raw.githubusercontent.com/princeton-nlp/WebShop/master/baseline_models/data/goal_query_map.json",
            "github.com/princeton-nlp/WebShop, baseline_models/data (train_search_il.py reads it)",
        ),
    ),
}

ALFWORLD_SPLITS = ("train", "valid_seen", "valid_unseen")
ALFWORLD_SKIP_MARKERS = ("movable", "Sliced")
WEBSHOP_FIXED_GOALS = 60

_GAME_FILE = "game.tw-pddl"
_PATH_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


# -- download ----------------------------------------------------------------------------------


def download(
    url: str,
    dest: Path,
    *,
    client: httpx.Client | None = None,
    timeout: float = 60.0,
    chunk_size: int = 1 << 16,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Stream `url` into `dest` (written to `dest.part`, then renamed: never a half file).

    `client` lets callers (and tests) supply transport, proxies or retries; `progress` gets
    (bytes so far, total or None) after each chunk. Raises FetchError on any failure.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")
    own_client = client is None
    http = client or httpx.Client(follow_redirects=True, timeout=timeout)
    try:
        with http.stream("GET", url) as response:
            if response.status_code != 200:
                raise FetchError(f"GET {url}: HTTP {response.status_code}")
            length = response.headers.get("content-length")
            total = int(length) if length and length.isdigit() else None
            written = 0
            with partial.open("wb") as handle:
                for chunk in response.iter_bytes(chunk_size):
                    handle.write(chunk)
                    written += len(chunk)
                    if progress is not None:
                        progress(written, total)
        if written == 0:
            raise FetchError(f"GET {url}: empty body")
        if total is not None and written != total:
            raise FetchError(f"GET {url}: got {written} of {total} bytes")
        os.replace(partial, dest)
        return dest
    except httpx.HTTPError as err:
        raise FetchError(f"GET {url}: {err}") from err
    finally:
        partial.unlink(missing_ok=True)
        if own_client:
            http.close()


# -- shared helpers ----------------------------------------------------------------------------


@contextmanager
def _atomic_file(path: Path) -> Iterator[IO[bytes]]:
    """Write `path` through a temporary file in the same directory, renamed when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read_bytes(path: Path) -> bytes:
    if not Path(path).is_file():
        raise DataError(Path(path), "file is missing")
    return Path(path).read_bytes()


def _json_bytes(path: Path) -> tuple[bytes, Any]:
    raw = _read_bytes(path)
    try:
        return raw, json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(Path(path), f"not valid JSON: {err}") from err


def _jsonl_lines(path: Path) -> list[bytes]:
    """The non-empty lines of a JSONL file, each checked to be JSON and kept byte for byte."""
    lines = []
    for number, line in enumerate(_read_bytes(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DataError(Path(path), f"line {number} is not valid JSON: {err}") from err
        lines.append(line)
    return lines


# -- ALFWorld ----------------------------------------------------------------------------------


def _alfworld_member(name: str) -> tuple[str, str, str] | None:
    """(split, game, trial) for an archive member `.../<split>/<game>/<trial>/game.tw-pddl`."""
    parts = name.split("/")
    if len(parts) < 4 or parts[-1] != _GAME_FILE:
        return None
    split, game, trial = parts[-4], parts[-3], parts[-2]
    if split not in ALFWORLD_SPLITS:
        return None
    if not (_PATH_PART.match(game) and _PATH_PART.match(trial)):
        return None
    return split, game, trial


def layout_alfworld(archive: Path, data_root: Path) -> dict[str, int]:
    """Copy the games of the official tw-pddl archive to `alfworld/<split>/<game>/<trial>/`.

    Only `game.tw-pddl` members under a known split are read, and destinations are built from
    validated path parts (never from the member name as such), so a hostile archive cannot
    write outside the data root. Returns the number of games per split, plus `skipped` (games
    with 'movable' or 'Sliced' in the path).
    """
    archive = Path(archive)
    if not archive.is_file():
        raise DataError(archive, "archive is missing")
    counts = dict.fromkeys(ALFWORLD_SPLITS, 0)
    skipped = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                parsed = _alfworld_member(info.filename)
                if parsed is None:
                    continue
                split, game, trial = parsed
                if any(m in f"{game}/{trial}" for m in ALFWORLD_SKIP_MARKERS):
                    skipped += 1
                    continue
                target = Path(data_root) / "alfworld" / split / game / trial / _GAME_FILE
                with zf.open(info) as source, _atomic_file(target) as sink:
                    shutil.copyfileobj(source, sink)
                counts[split] += 1
    except zipfile.BadZipFile as err:
        raise DataError(archive, f"not a zip archive: {err}") from err
    if not any(counts.values()):
        raise DataError(archive, "no `<split>/<game>/<trial>/game.tw-pddl` files in the archive")
    return {**counts, "skipped": skipped}


# -- DBBench -----------------------------------------------------------------------------------


def layout_dbbench(dev_jsonl: Path, standard_jsonl: Path, data_root: Path) -> dict[str, int]:
    """`dbbench/dev.jsonl` (all rows) and `dbbench/standard_even.jsonl` (rows 0, 2, 4, ... of
    AgentBench's standard.jsonl), each row kept byte for byte."""
    dev = _jsonl_lines(dev_jsonl)
    even = _jsonl_lines(standard_jsonl)[0::2]
    out = Path(data_root) / "dbbench"
    for name, lines in (("dev.jsonl", dev), ("standard_even.jsonl", even)):
        with _atomic_file(out / name) as sink:
            sink.write(b"".join(line + b"\n" for line in lines))
    return {"dev": len(dev), "standard_even": len(even)}


# -- WebShop -----------------------------------------------------------------------------------


def layout_webshop(
    fixed_goals_json: Path, human_goals_json: Path, goal_query_map_json: Path, data_root: Path
) -> dict[str, int]:
    """`webshop/goals_fixed_0_59.json` (ExpeL's first 60 fixed goals), and WebShop's
    `human_goals.json` and `goal_query_map.json` copied unchanged after a shape check."""
    _, fixed = _json_bytes(fixed_goals_json)
    if not isinstance(fixed, list) or len(fixed) < WEBSHOP_FIXED_GOALS:
        raise DataError(
            Path(fixed_goals_json), f"expected a list of >= {WEBSHOP_FIXED_GOALS} goals"
        )
    goals = fixed[:WEBSHOP_FIXED_GOALS]
    for index, goal in enumerate(goals):
        if not (isinstance(goal, dict) and goal.get("session_idx") == f"fixed_{index}"):
            raise DataError(Path(fixed_goals_json), f"goal {index} is not session fixed_{index}")
        if not isinstance(goal.get("task"), str) or not isinstance(goal.get("key"), dict):
            raise DataError(Path(fixed_goals_json), f"goal {index} lacks `task` or `key`")
    human_raw, human = _json_bytes(human_goals_json)
    if not isinstance(human, list) or not all(isinstance(h, str) for h in human):
        raise DataError(Path(human_goals_json), "expected a list of instruction strings")
    query_raw, query_map = _json_bytes(goal_query_map_json)
    if not isinstance(query_map, dict):
        raise DataError(Path(goal_query_map_json), "expected an object: instruction -> queries")

    out = Path(data_root) / "webshop"
    with _atomic_file(out / "goals_fixed_0_59.json") as sink:
        sink.write(json.dumps(goals, indent=1).encode("utf-8"))
    with _atomic_file(out / "human_goals.json") as sink:
        sink.write(human_raw)
    with _atomic_file(out / "goal_query_map.json") as sink:
        sink.write(query_raw)
    return {"goals_fixed": len(goals), "human_goals": len(human), "goal_queries": len(query_map)}


# -- the whole fetch ---------------------------------------------------------------------------


def fetch_env_data(
    env: str,
    data_root: Path,
    *,
    cache_dir: Path | None = None,
    client: httpx.Client | None = None,
    keep_downloads: bool = False,
) -> dict[str, int]:
    """Download `SOURCES[env]` into `cache_dir` (a temporary directory by default; a file
    already there is not downloaded again) and lay them out under `data_root`."""
    if env not in SOURCES:
        from harness_r1.envs.registry import plugin_entry_points

        if env in plugin_entry_points():
            raise KeyError(
                f"{env!r} is a plugin env: its package brings or makes its own data (its "
                f"README says how); `data fetch` gets the official files of "
                f"{', '.join(SOURCES)}"
            )
        raise KeyError(f"unknown env {env!r}; known: {', '.join(SOURCES)}")
    temporary = cache_dir is None
    cache = Path(cache_dir) if cache_dir is not None else Path(tempfile.mkdtemp(prefix="hr1-"))
    try:
        files: dict[str, Path] = {}
        for source in SOURCES[env]:
            path = cache / source.filename
            if not path.is_file():
                download(source.url, path, client=client)
            files[source.filename] = path
        if env == "alfworld":
            counts = layout_alfworld(files["json_2.1.2_tw-pddl.zip"], data_root)
        elif env == "dbbench":
            counts = layout_dbbench(files["dev.jsonl"], files["standard.jsonl"], data_root)
        else:
            counts = layout_webshop(
                files["webshop.fixed100.json"],
                files["human_goals.json"],
                files["goal_query_map.json"],
                data_root,
            )
        return counts
    finally:
        if temporary and not keep_downloads:
            shutil.rmtree(cache, ignore_errors=True)
