"""Shared pieces of the deploy tests (imported by conftest.py and the test modules): a signer
and keyring, a registry on a temp file, a publisher, recording hook sets (so a test can see
which overlay served an episode and when a HookSet was closed), in-memory logs standing in for
the broker, signed releases and control commands, and agent-0's client and its settings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness_r1.consumers.records import Record
from harness_r1.contracts import (
    ControlCommand,
    ControlKind,
    HookCode,
    HookName,
    OverlayRelease,
    Patch,
)
from harness_r1.deploy.client import ClientConfig, ClientMetrics, OverlayClient
from harness_r1.deploy.publisher import DeployMetrics, Publisher
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.signing import Keyring, Signer, seal
from harness_r1.harness.hooks import HookCall


def make_patch(tag: str, env: str = "dbbench") -> Patch:
    code = f"def hook(ctx, state):\n    return {{'note': {tag!r}}}\n"
    return Patch(env=env, description=tag, hooks=[HookCode(hook=HookName.PRE_DECISION, code=code)])


@dataclass
class TaggedHooks:
    """A HookSet that records its overlay and whether it was closed (not a sandbox)."""

    overlay_id: str
    closed: bool = False

    def has(self, hook: HookName) -> bool:
        return False

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall:
        return HookCall(state=state)

    def close(self) -> None:
        self.closed = True


@dataclass
class ListSource:
    """TEST DOUBLE of the broker for unit tests: an in-memory log per topic with positions.
    The same client runs against the real broker in test_fleet.py."""

    log: list[Record] = field(default_factory=list)
    start: int = 0
    offline: bool = False

    def __post_init__(self) -> None:
        self.next = self.start

    def append(self, topic: str, value: bytes) -> None:
        self.log.append(Record(topic, 0, len(self.log), None, value, (), 0))

    def poll(self, timeout_ms: int | None = None) -> list[Record]:
        if self.offline:
            return []
        out, self.next = self.log[self.next :], len(self.log)
        return out

    def positions(self) -> dict[str, int]:
        return {"log:0": self.next}

    def close(self) -> None:
        pass


@dataclass
class RecordingSource(ListSource):
    """A ListSource that records when each poll came and the wait it was given, fails its
    first `failures` polls, and (like the real reader) waits out the timeout when idle."""

    failures: int = 0
    polls: list[tuple[float, int | None]] = field(default_factory=list)

    def poll(self, timeout_ms: int | None = None) -> list[Record]:
        self.polls.append((time.monotonic(), timeout_ms))
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker gone")
        out = super().poll(timeout_ms)
        if not out:
            time.sleep((timeout_ms or 0) / 1000)
        return out


def signed_release(
    registry: OverlayRegistry, signer: Signer, overlay_id: str, seq: int, **changes: object
) -> bytes:
    """The exact bytes of a release of a registered overlay, signed by SIGNER (any key, so
    tests can forge), with any field changed."""
    record = registry.get(overlay_id)
    now = datetime.now(UTC)
    fields: dict[str, object] = {
        "overlay_id": overlay_id,
        "target": record.target,
        "seq": seq,
        "key_id": signer.key_id,
        "issued_at": now,
        "expires_at": now + timedelta(minutes=10),
        "patch_sha256": record.patch.sha256(),
        "patch": record.patch,
    }
    fields.update(changes)
    return seal(OverlayRelease.model_validate(fields), signer).to_json_bytes()


@dataclass
class Rig:
    signer: Signer
    keyring: Keyring
    registry: OverlayRegistry
    publisher: Publisher
    bus: ListSource
    tmp: Path
    hooks_made: list[TaggedHooks] = field(default_factory=list)

    def hooks_factory(self, patch: Patch, overlay_id: str) -> TaggedHooks:
        hooks = TaggedHooks(overlay_id)
        self.hooks_made.append(hooks)
        return hooks

    def client(self, agent_id: str = "agent-0", target: str = "pool-a", **kw: Any) -> OverlayClient:
        shared = self.bus
        config = ClientConfig(agent_id=agent_id, target=target, state_dir=self.tmp / agent_id)
        return OverlayClient(
            config,
            self.keyring,
            self.hooks_factory,
            source_factory=lambda positions: ListSource(
                shared.log, start=positions.get("log:0", 0)
            ),
            **kw,
        )

    def overlay(self, tag: str, target: str = "pool-a", parent: str | None = None) -> str:
        return self.registry.add(make_patch(tag), target, parent_overlay_id=parent).overlay_id


def signed_control(rig: Rig, command: ControlKind, seq: int, **changes: object) -> bytes:
    """The exact bytes of a control command for pool-a signed by the rig's key."""
    now = datetime.now(UTC)
    fields: dict[str, object] = {
        "command": command,
        "command_id": f"c{seq}",
        "target": "pool-a",
        "seq": seq,
        "key_id": rig.signer.key_id,
        "issued_at": now,
        "expires_at": now + timedelta(minutes=10),
        "actor": "o",
        "reason": "test",
    }
    fields.update(changes)
    return seal(ControlCommand.model_validate(fields), rig.signer).to_json_bytes()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    from prometheus_client import CollectorRegistry

    signer = Signer("k1", Ed25519PrivateKey.generate())
    registry = OverlayRegistry(f"sqlite:///{tmp_path / 'state.db'}")
    bus = ListSource()
    publisher = Publisher(
        registry,
        signer,
        lambda topic, value, key: bus.append(topic, value),
        metrics=DeployMetrics(CollectorRegistry()),
    )
    yield Rig(signer, Keyring.of([signer]), registry, publisher, bus, tmp_path)
    registry.close()


@pytest.fixture
def client_metrics() -> ClientMetrics:
    from prometheus_client import CollectorRegistry

    return ClientMetrics(CollectorRegistry())


@pytest.fixture
def agent_config(rig: Rig) -> ClientConfig:
    """The settings of agent-0 on pool-a, its state in the test's temp dir (those of
    `rig.client()`), for a test that builds its OverlayClient itself."""
    return ClientConfig(agent_id="agent-0", target="pool-a", state_dir=rig.tmp / "agent-0")


@pytest.fixture
def client(rig: Rig) -> OverlayClient:
    """The client of agent-0 on pool-a, made before the test publishes anything."""
    return rig.client()
