"""`harness-r1 data status` and `data fetch`: what is present, and getting the official files."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness_r1.envs import DataError, env_names, get_suite


def status_table(root: Path) -> Table:
    """Per env and split: files present, tasks loadable, or the error that stops loading."""
    table = Table(title=f"data root {root}")
    for column in ("env", "split", "files", "tasks", "problem"):
        table.add_column(column)
    for env in env_names():
        suite = get_suite(env)
        files_by_split = suite.data_files(root)
        for split in suite.splits:
            files = list(files_by_split.get(split, []))
            present = sum(1 for f in files if (root / f).exists())
            try:
                tasks = str(len(suite.load_tasks(root, split)))
                problem = ""
            except DataError as err:
                tasks, problem = "-", str(err)
            table.add_row(env, split, f"{present}/{len(files)}", tasks, problem)
    return table


def fetch(env: str, root: Path, console: Console) -> None:
    """Download and lay out; a failure names the URL and leaves no half-written file."""
    from harness_r1.envs import FetchError, fetch_env_data

    console.print(f"fetching {env} into {root} ...")
    try:
        counts = fetch_env_data(env, root)
    except (FetchError, KeyError) as err:
        raise SystemExit(f"data fetch {env} failed: {err}") from err
    for name, count in sorted(counts.items()):
        console.print(f"  {name}: {count}")
