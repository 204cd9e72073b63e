"""Topic setup for clients: `ensure_topics` creates the topics that are missing and waits until
each has a leader for every partition; topic names are checked here.

Topics are created explicitly (`ensure_topics`), never on first use: producers and readers are
built with auto-creation off, so a typo fails loudly instead of creating a topic with the
broker's default partition count.

Why a module of its own: making sure topics exist is a step before producing or reading, part
of neither; the reader checks its topic names with the same rule. An operator's provisioning
(chosen partitions, replication and configs) is topics.py, which shares this module's error
and error code.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kafka.errors import KafkaError

from harness_r1.consumers.kafka_client import KafkaSettings, _Admin, _client_config, _unavailable

TOPIC_EXISTS = 36  # Kafka error code TOPIC_ALREADY_EXISTS
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class TopicSetupError(RuntimeError):
    """Topics could not be created, or did not show up in the broker's metadata in time."""


def _check_topic_names(topics: Sequence[str]) -> list[str]:
    if isinstance(topics, str):
        raise TypeError(f"topics must be a sequence of names, not the string {topics!r}")
    names = list(dict.fromkeys(topics))
    if not names:
        raise ValueError("no topics given: pass at least one topic name")
    for name in names:
        if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in {".", ".."}:
            raise ValueError(
                f"invalid topic name {name!r}: use 1-249 characters from [A-Za-z0-9._-]"
            )
    return names


def ensure_topics(
    settings: KafkaSettings,
    topics: Sequence[str],
    partitions: int = 1,
    *,
    replication_factor: int = -1,
    timeout_s: float | None = None,
) -> None:
    """Create the topics that do not exist yet, then wait until the metadata shows every topic
    with a leader for each partition (bounded by timeout_s, default send_timeout_s).

    Idempotent: an existing topic (even one created concurrently) is fine and is left as it is,
    partition count included. replication_factor -1 takes the broker's default.
    """
    names = _check_topic_names(topics)
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    wait_s = settings.send_timeout_s if timeout_s is None else timeout_s
    try:
        admin = _Admin(**_client_config(settings))
    except KafkaError as exc:
        raise _unavailable(settings, "ensure_topics", exc) from exc
    try:
        existing = set(admin.list_topics())
        missing = [name for name in names if name not in existing]
        if missing:
            spec = {
                name: {"num_partitions": partitions, "replication_factor": replication_factor}
                for name in missing
            }
            response = admin.create_topics(
                spec, timeout_ms=settings.request_timeout_ms, raise_errors=False
            )
            failed = [
                f"{row['name']}: error {row['error_code']} {row.get('error_message') or ''}"
                for row in response.get("topics", [])
                if row["error_code"] not in (0, TOPIC_EXISTS)
            ]
            if failed:
                raise TopicSetupError(f"could not create topics: {'; '.join(failed)}")
        _wait_for_topics(admin, names, wait_s)
    except KafkaError as exc:
        raise TopicSetupError(
            f"ensure_topics {names} on {settings.bootstrap}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def _wait_for_topics(admin: Any, names: list[str], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        rows = {row["name"]: row for row in admin.describe_topics(names)}
        pending = [name for name in names if not _topic_ready(rows.get(name))]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TopicSetupError(
                f"topics {pending} not in the broker's metadata with leaders after {wait_s} s"
            )
        time.sleep(0.1)


def _topic_ready(row: Mapping[str, Any] | None) -> bool:
    if row is None or row.get("error_code") != 0:
        return False
    parts = row.get("partitions") or []
    return bool(parts) and all(part.get("leader_id", -1) >= 0 for part in parts)
