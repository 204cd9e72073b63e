"""Topic provisioning for operators: create topics with chosen partitions, replication and
configs, and describe what a cluster has, against any Kafka.

The daemon's own `ensure_topics` only makes sure its topics exist (one partition, the broker's
defaults) so that a first start works anywhere; a production cluster gets its topics from
`harness-r1 topics create` first, with the settings `daemon/topics.py` recommends. Existing
topics are never changed here: a difference is reported, and the operator decides (adding
partitions to a keyed topic moves keys, and shrinking is impossible).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import KafkaError

from harness_r1.consumers.kafka_client import KafkaSettings, admin_client
from harness_r1.consumers.topic_setup import TOPIC_EXISTS, TopicSetupError

__all__ = ["TopicSpec", "TopicState", "create_topics", "describe_topics", "differences"]


@dataclass(frozen=True)
class TopicSpec:
    """A topic as it should be: `replication_factor` -1 takes the broker's default."""

    name: str
    partitions: int
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True)
class TopicState:
    """A topic as the cluster reports it; `configs` holds what the broker reported (some
    brokers, the embedded tansu among them, report none: {})."""

    name: str
    exists: bool
    partitions: int = 0
    replication_factor: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


def create_topics(settings: KafkaSettings, specs: Sequence[TopicSpec]) -> dict[str, str]:
    """Create every missing topic as specified; returns name -> "created" | "exists".
    Existing topics are left as they are (see `differences`)."""
    with admin_client(settings, "topics create") as admin:
        try:
            existing = set(admin.list_topics())
            missing = [spec for spec in specs if spec.name not in existing]
            if missing:
                response = admin.create_topics(
                    [_new_topic(spec) for spec in missing],
                    timeout_ms=settings.request_timeout_ms,
                    raise_errors=False,
                )
                _raise_failures(response)
        except KafkaError as exc:
            raise TopicSetupError(f"creating topics: {type(exc).__name__}: {exc}") from exc
    created = {spec.name for spec in missing}
    return {spec.name: "created" if spec.name in created else "exists" for spec in specs}


def describe_topics(settings: KafkaSettings, names: Sequence[str]) -> list[TopicState]:
    """Partitions, replication and the configs the broker reports, for each name."""
    with admin_client(settings, "topics describe") as admin:
        try:
            existing = set(admin.list_topics())
            present = [name for name in names if name in existing]
            rows = {row["name"]: row for row in admin.describe_topics(present)} if present else {}
            configs = _configs(admin, present)
        except KafkaError as exc:
            raise TopicSetupError(f"describing topics: {type(exc).__name__}: {exc}") from exc
    states = []
    for name in names:
        row = rows.get(name)
        if row is None:
            states.append(TopicState(name=name, exists=False))
            continue
        parts = row.get("partitions") or []
        replicas = max((len(part.get("replica_nodes") or []) for part in parts), default=0)
        states.append(
            TopicState(
                name=name,
                exists=True,
                partitions=len(parts),
                replication_factor=replicas,
                configs=configs.get(name, {}),
            )
        )
    return states


def differences(spec: TopicSpec, state: TopicState) -> list[str]:
    """How an existing topic falls short of its spec, in words an operator can act on.
    Configs the broker does not report are not counted as different."""
    if not state.exists:
        return ["missing: run `harness-r1 topics create`"]
    found = []
    if state.partitions < spec.partitions:
        found.append(f"{state.partitions} partition(s), recommended {spec.partitions}")
    if state.partitions > spec.partitions and spec.partitions == 1:
        found.append(f"{state.partitions} partitions: must be 1 (one order for every reader)")
    if spec.replication_factor > 0 and state.replication_factor < spec.replication_factor:
        found.append(
            f"replication {state.replication_factor}, recommended {spec.replication_factor}"
        )
    for key, want in spec.configs.items():
        have = state.configs.get(key)
        if have is not None and have != want:
            found.append(f"{key}={have}, recommended {want}")
    return found


def _new_topic(spec: TopicSpec) -> NewTopic:
    return NewTopic(
        spec.name, spec.partitions, spec.replication_factor, topic_configs=dict(spec.configs)
    )


def _raise_failures(response: Mapping[str, Any]) -> None:
    failed = [
        f"{row['name']}: error {row['error_code']} {row.get('error_message') or ''}".strip()
        for row in response.get("topics", [])
        if row["error_code"] not in (0, TOPIC_EXISTS)
    ]
    if failed:
        raise TopicSetupError(f"could not create topics: {'; '.join(failed)}")


def _configs(admin: Any, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Topic configs by name, as far as the broker answers DescribeConfigs."""
    if not names:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
    try:
        answer = admin.describe_configs(resources)
    except KafkaError:
        return {}
    return _parse_configs(answer)


def _parse_configs(answer: Any) -> dict[str, dict[str, str]]:
    """kafka-python 3 answers {"topic": {name: {key: value | {"value": ...}}}}; older
    versions a list of responses. Anything unrecognised reads as 'nothing reported'."""
    topics = answer.get("topic") if isinstance(answer, dict) else None
    if not isinstance(topics, dict):
        return {}
    out: dict[str, dict[str, str]] = {}
    for name, entries in topics.items():
        if not isinstance(entries, dict):
            continue
        flat = {}
        for key, value in entries.items():
            if isinstance(value, dict):
                value = value.get("value")
            if value is not None:
                flat[str(key)] = str(value)
        out[str(name)] = flat
    return out
