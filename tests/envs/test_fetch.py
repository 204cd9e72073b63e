"""`harness-r1 data fetch`: downloads (over a mock transport) and the data-root layouts, checked
against the shared benchmark copy where it exists."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import httpx
import pytest

from harness_r1.envs import ENV_NAMES
from harness_r1.envs.alfworld.tasks import load_tasks
from harness_r1.envs.data import DataError
from harness_r1.envs.fetch import (
    SOURCES,
    FetchError,
    download,
    fetch_env_data,
    layout_alfworld,
    layout_dbbench,
    layout_webshop,
)

DATA_ROOT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
needs_data = pytest.mark.skipif(
    not (DATA_ROOT / "alfworld" / "valid_seen").is_dir(), reason="benchmark data not present"
)


def _mock_client(files: dict[str, bytes]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        body = files.get(str(request.url))
        return httpx.Response(404) if body is None else httpx.Response(200, content=body)

    return httpx.Client(transport=httpx.MockTransport(handler))


# -- sources -----------------------------------------------------------------------------------


def test_every_env_has_official_sources() -> None:
    assert set(SOURCES) == set(ENV_NAMES)
    for sources in SOURCES.values():
        assert sources
        for source in sources:
            assert source.url.startswith("https://") and source.url.endswith(source.filename)
            assert source.found_in


# -- download ----------------------------------------------------------------------------------


def test_download_streams_into_place(tmp_path: Path) -> None:
    body = b"x" * 200_000
    seen: list[tuple[int, int | None]] = []
    with _mock_client({"https://example.org/a.bin": body}) as client:
        path = download(
            "https://example.org/a.bin",
            tmp_path / "sub" / "a.bin",
            client=client,
            chunk_size=65536,
            progress=lambda done, total: seen.append((done, total)),
        )
    assert path.read_bytes() == body
    assert seen[-1] == (len(body), len(body)) and len(seen) >= 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.bin"]


def test_download_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    with _mock_client({}) as client, pytest.raises(FetchError, match="HTTP 404"):
        download("https://example.org/missing.json", tmp_path / "m.json", client=client)
    assert list(tmp_path.iterdir()) == []

    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route to host", request=request)

    with (
        httpx.Client(transport=httpx.MockTransport(broken)) as client,
        pytest.raises(FetchError, match="no route"),
    ):
        download("https://example.org/x", tmp_path / "x", client=client)
    assert list(tmp_path.iterdir()) == []


# -- ALFWorld ----------------------------------------------------------------------------------


def _zip_with_games(tmp_path: Path, games: list[str]) -> Path:
    archive = tmp_path / "json_2.1.2_tw-pddl.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for relative in games:  # alfworld/valid_seen/<game>/<trial>/game.tw-pddl
            _, split, game, trial, _ = relative.split("/")
            zf.write(DATA_ROOT / relative, f"json_2.1.1/{split}/{game}/{trial}/game.tw-pddl")
            zf.writestr(f"json_2.1.1/{split}/{game}/{trial}/traj_data.json", "{}")
        payload = (DATA_ROOT / games[0]).read_bytes()
        zf.writestr(
            "json_2.1.1/train/pick_and_place_with_movable_recep-Cup-Pan-Sink-1/t1/game.tw-pddl",
            payload,
        )
        zf.writestr(
            "json_2.1.1/train/pick_heat_then_place_in_recep-AppleSliced-None-Fridge-1/t1/"
            "game.tw-pddl",
            payload,
        )
        zf.writestr("json_2.1.1/valid_seen/../../../evil/t1/game.tw-pddl", payload)
        zf.writestr("../../valid_seen/../t1/game.tw-pddl", payload)
        zf.writestr("json_2.1.1/valid_unseen/README.txt", "not a game")
    return archive


@needs_data
def test_layout_alfworld_from_an_official_style_archive(tmp_path: Path) -> None:
    shared = load_tasks(DATA_ROOT, "valid_seen")
    picked = [shared[0], next(t for t in shared if t.task_type != shared[0].task_type)]
    archive = _zip_with_games(tmp_path, [t.payload["game_file"] for t in picked])
    root = tmp_path / "data"

    counts = layout_alfworld(archive, root)

    assert counts == {"train": 0, "valid_seen": 2, "valid_unseen": 0, "skipped": 2}
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == sorted(
        t.payload["game_file"] for t in picked
    )
    for task in picked:
        game_file = task.payload["game_file"]
        assert (root / game_file).read_bytes() == (DATA_ROOT / game_file).read_bytes()
    laid_out = load_tasks(root, "valid_seen")
    assert [t.model_dump() for t in laid_out] == [
        t.model_dump() for t in sorted(picked, key=lambda t: t.task_id)
    ]
    assert not (tmp_path / "evil").exists()


def test_layout_alfworld_rejects_bad_archives(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="missing"):
        layout_alfworld(tmp_path / "nope.zip", tmp_path / "data")
    not_zip = tmp_path / "not.zip"
    not_zip.write_bytes(b"PK? no")
    with pytest.raises(DataError, match="not a zip"):
        layout_alfworld(not_zip, tmp_path / "data")
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("json_2.1.1/train/README", "nothing")
    with pytest.raises(DataError, match="no `<split>"):
        layout_alfworld(empty, tmp_path / "data")


# -- DBBench -----------------------------------------------------------------------------------


def _row(n: int) -> bytes:
    return json.dumps({"description": f"q{n}", "label": [str(n)], "type": ["other"]}).encode()


def test_layout_dbbench_keeps_every_other_standard_row(tmp_path: Path) -> None:
    dev = tmp_path / "dev.jsonl"
    dev.write_bytes(_row(100) + b"\n\n" + _row(101) + b"\n" + _row(102))
    standard = tmp_path / "standard.jsonl"
    standard.write_bytes(b"\n".join(_row(n) for n in range(5)) + b"\n")

    counts = layout_dbbench(dev, standard, tmp_path / "data")

    assert counts == {"dev": 3, "standard_even": 3}
    out = tmp_path / "data" / "dbbench"
    assert (out / "dev.jsonl").read_bytes() == b"".join(_row(n) + b"\n" for n in (100, 101, 102))
    assert (out / "standard_even.jsonl").read_bytes() == b"".join(
        _row(n) + b"\n" for n in (0, 2, 4)
    )


@needs_data
def test_layout_dbbench_reproduces_the_shared_files(tmp_path: Path) -> None:
    even = (DATA_ROOT / "dbbench" / "standard_even.jsonl").read_bytes().splitlines()
    standard = tmp_path / "standard.jsonl"
    standard.write_bytes(b"".join(row + b"\n" + _row(n) + b"\n" for n, row in enumerate(even)))

    counts = layout_dbbench(DATA_ROOT / "dbbench" / "dev.jsonl", standard, tmp_path / "data")

    assert counts == {"dev": 60, "standard_even": 150}
    for name in ("dev.jsonl", "standard_even.jsonl"):
        produced = (tmp_path / "data" / "dbbench" / name).read_bytes()
        assert produced == (DATA_ROOT / "dbbench" / name).read_bytes(), name


def test_layout_dbbench_names_a_bad_line(tmp_path: Path) -> None:
    dev = tmp_path / "dev.jsonl"
    dev.write_bytes(_row(1) + b"\n{oops\n")
    with pytest.raises(DataError, match="line 2") as err:
        layout_dbbench(dev, dev, tmp_path / "data")
    assert err.value.path == dev
    assert not (tmp_path / "data").exists()


# -- WebShop -----------------------------------------------------------------------------------


@needs_data
def test_layout_webshop_reproduces_the_shared_files(tmp_path: Path) -> None:
    shared = DATA_ROOT / "webshop"
    goals = json.loads((shared / "goals_fixed_0_59.json").read_text())
    extra = [
        {"task": f"goal {n}", "session_idx": f"fixed_{n}", "key": {"asin": "B0"}}
        for n in range(60, 100)
    ]
    fixed100 = tmp_path / "webshop.fixed100.json"
    fixed100.write_text(json.dumps(goals + extra, indent=4))

    counts = layout_webshop(
        fixed100, shared / "human_goals.json", shared / "goal_query_map.json", tmp_path / "data"
    )

    assert counts == {"goals_fixed": 60, "human_goals": 12087, "goal_queries": 1506}
    for name in ("goals_fixed_0_59.json", "human_goals.json", "goal_query_map.json"):
        produced = (tmp_path / "data" / "webshop" / name).read_bytes()
        assert produced == (shared / name).read_bytes(), name


def test_layout_webshop_checks_the_goal_order(tmp_path: Path) -> None:
    goals = [{"task": "t", "session_idx": f"fixed_{n}", "key": {}} for n in range(100)]
    goals[3]["session_idx"] = "fixed_77"
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(goals))
    human = tmp_path / "human.json"
    human.write_text('["a"]')
    queries = tmp_path / "queries.json"
    queries.write_text('{"a": ["b"]}')
    with pytest.raises(DataError, match="goal 3"):
        layout_webshop(fixed, human, queries, tmp_path / "data")
    goals[3]["session_idx"] = "fixed_3"
    fixed.write_text(json.dumps(goals))
    with pytest.raises(DataError, match="instruction strings"):
        layout_webshop(fixed, queries, queries, tmp_path / "data")
    assert not (tmp_path / "data").exists()
    assert layout_webshop(fixed, human, queries, tmp_path / "data")["goals_fixed"] == 60


# -- fetch, end to end over a mock transport ---------------------------------------------------


def test_fetch_dbbench_end_to_end(tmp_path: Path) -> None:
    urls = {source.filename: source.url for source in SOURCES["dbbench"]}
    files = {
        urls["dev.jsonl"]: _row(1) + b"\n",
        urls["standard.jsonl"]: b"\n".join(_row(n) for n in range(4)) + b"\n",
    }
    with _mock_client(files) as client:
        counts = fetch_env_data("dbbench", tmp_path / "data", client=client)
    assert counts == {"dev": 1, "standard_even": 2}
    assert (tmp_path / "data" / "dbbench" / "standard_even.jsonl").read_bytes() == (
        _row(0) + b"\n" + _row(2) + b"\n"
    )

    cache = tmp_path / "cache"
    with _mock_client(files) as client:
        fetch_env_data("dbbench", tmp_path / "data2", client=client, cache_dir=cache)
    assert sorted(p.name for p in cache.iterdir()) == ["dev.jsonl", "standard.jsonl"]
    with _mock_client({}) as offline:  # cached files are not downloaded again
        assert (
            fetch_env_data("dbbench", tmp_path / "data3", client=offline, cache_dir=cache) == counts
        )
    with pytest.raises(KeyError):
        fetch_env_data("nethack", tmp_path / "data")
