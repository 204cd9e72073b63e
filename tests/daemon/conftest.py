"""Fixtures shared by the daemon tests: `db_url`, the state store on SQLite and on the local
PostgreSQL (127.0.0.1:5432, trust auth, a database of this test process's own: `pg_url`;
skipped, saying why, where none answers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, text


def _drop_daemon_tables(engine: Engine) -> None:
    """Every daemon_ table, known to this code or not (a test may leave a newer schema)."""
    names = [n for n in inspect(engine).get_table_names() if n.startswith("daemon_")]
    with engine.begin() as conn:
        for name in names:
            conn.execute(text(f'DROP TABLE IF EXISTS "{name}" CASCADE'))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    pg_url = request.getfixturevalue("pg_url")  # only here: SQLite runs need no server
    engine = create_engine(pg_url, connect_args={"connect_timeout": 2})
    _drop_daemon_tables(engine)
    try:
        yield pg_url
    finally:
        _drop_daemon_tables(engine)
        engine.dispose()
