"""The backup and restore procedure of docs/operations.md, with the commands it gives, on both
stores: SQLite (`sqlite3 state.db ".backup FILE"`, safe while the daemon writes: it copies a
consistent snapshot) and PostgreSQL (`pg_dump -Fc`, then `pg_restore` into an empty database).
After the restore a store opens on the copy, holds exactly what the backup held (not what was
written after it), and takes new records. Skipped, saying which, where a tool is missing."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from test_store import GROUP, TOPIC, item

from harness_r1.daemon.store import StateStore


def _fill(store: StateStore, first: int, count: int) -> None:
    items = [item(f"t{i}", offset=i) for i in range(first, first + count)]
    store.ingest(items, GROUP, {(TOPIC, 0): first + count})


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stdout}{done.stderr}"


def test_sqlite_backup_and_restore(tmp_path: Path) -> None:
    if shutil.which("sqlite3") is None:
        pytest.skip("the sqlite3 command-line tool is not installed (Debian package sqlite3)")
    live, backup = tmp_path / "state.db", tmp_path / "backup.db"
    store = StateStore(f"sqlite:///{live}")
    _fill(store, 0, 20)
    _run("sqlite3", str(live), f".backup {backup}")  # the store stays open and writable
    _fill(store, 20, 5)  # written after the backup: lost by a restore, by design
    assert store.trajectory_count() == 25
    store.close()

    shutil.copy(backup, live)  # the restore, with the daemon stopped
    restored = StateStore(f"sqlite:///{live}")
    try:
        assert restored.trajectory_count() == 20
        assert restored.positions(GROUP) == {(TOPIC, 0): 20}  # ingest re-reads from here
        _fill(restored, 20, 5)
        assert restored.trajectory_count() == 25
    finally:
        restored.close()


def test_postgresql_backup_and_restore(pg_url: str, tmp_path: Path) -> None:
    if shutil.which("pg_dump") is None or shutil.which("pg_restore") is None:
        pytest.skip("pg_dump/pg_restore not installed (Debian package postgresql-client)")
    url = make_url(pg_url)
    source = f"restore_src_{uuid.uuid4().hex[:8]}"
    target = f"restore_dst_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{source}"'))
        conn.execute(text(f'CREATE DATABASE "{target}"'))
    libpq = ["-h", str(url.host), "-p", str(url.port or 5432), "-U", str(url.username)]
    try:
        store = StateStore(url.set(database=source).render_as_string(hide_password=False))
        _fill(store, 0, 20)
        dump = tmp_path / "state.dump"
        _run("pg_dump", *libpq, "-Fc", "-f", str(dump), source)
        _fill(store, 20, 5)
        store.close()
        _run("pg_restore", *libpq, "--no-owner", "-d", target, str(dump))
        restored = StateStore(url.set(database=target).render_as_string(hide_password=False))
        try:
            assert restored.trajectory_count() == 20
            assert restored.positions(GROUP) == {(TOPIC, 0): 20}
            _fill(restored, 20, 5)
            assert restored.trajectory_count() == 25
        finally:
            restored.close()
    finally:
        with admin.connect() as conn:
            for name in (source, target):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
