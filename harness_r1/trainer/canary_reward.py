"""GRPO's online reward: the canary. `CanaryReward` is a TRL reward function
(`f(prompts, completions, **kw) -> list[float | None]`): it parses each completion (invalid ->
the configured reward, without running anything), runs a packet's valid patches together on
that packet's canary batch (`PacketBatchResolver`: packet id -> batch and runner) and returns
each patch's success delta; an infrastructure failure gives None (TRL leaves it out of the
group's mean and std and gives it advantage 0)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from harness_r1.contracts import FailurePacket
from harness_r1.sandbox import CanaryBatch, Candidate, Evaluator, GateConfig, StaticLimits
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.prompt import engineer_messages
from harness_r1.trainer.prompt_config import PromptConfig
from harness_r1.trainer.prompt_examples import PromptExample
from harness_r1.trainer.propose import classify
from harness_r1.trainer.shaping import InvalidRewardShape

log = structlog.get_logger(__name__)


class PacketBatchResolver(Protocol):
    """Finds the canary batch a packet's patches are judged on, and the runner to judge them:
    the packet's tasks with the seeds they ran with, and a runner for the frozen target.
    Unknown packet ids raise LookupError (a wiring error, never turned into a reward)."""

    def resolve(self, packet_id: str) -> tuple[CanaryBatch, Evaluator]: ...


@dataclass
class MappingResolver:
    """A PacketBatchResolver over a dict: packet_id -> (batch, runner)."""

    batches: Mapping[str, tuple[CanaryBatch, Evaluator]]

    def resolve(self, packet_id: str) -> tuple[CanaryBatch, Evaluator]:
        try:
            return self.batches[packet_id]
        except KeyError:
            raise LookupError(f"no canary batch for packet {packet_id!r}") from None


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or a list of messages (the last one's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else ""
    return ""


def _per_row(kw: Mapping[str, Any], key: str, n: int) -> list[Any]:
    value = kw.get(key)
    if value is None:
        return [None] * n
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(f"column {key!r} has {len(value)} values for {n} completions")
        return list(value)
    return [value] * n


class CanaryReward:
    """TRL reward function (`f(prompts, completions, **kw) -> list[float | None]`): the canary
    delta of each completion's patch on its packet's batch.

    Needs the dataset columns `packet_id` and `env` (see `canary_rows`). Per call: every
    completion is parsed and statically checked (`trainer.propose.classify`); an invalid one
    gets `invalid_reward` and never reaches a runner. The valid ones of one packet are judged
    together, in one `evaluate` call on its batch (one shared baseline). Result per candidate:
    `evaluated` -> its delta (`metric`: "delta_success", the paper's reward, or
    "delta_mean_reward"); `invalid` (the runner's validator refused it) -> `invalid_reward`;
    with `graded`, invalid rewards are graded by stage and hook faults cost a little
    (`trainer.shaping`);
    `infra_error`, or an exception from the runner -> None (TRL skips it). `counts` keeps the
    tallies; `rewards` every reward returned.
    """

    __name__ = "canary_reward"

    def __init__(
        self,
        resolver: PacketBatchResolver,
        *,
        invalid_reward: float = 0.0,
        metric: str = "delta_success",
        limits: StaticLimits | None = None,
        graded: bool = False,
        attribution: GateConfig | None = None,
    ) -> None:
        if metric not in ("delta_success", "delta_mean_reward"):
            raise ValueError("metric must be delta_success or delta_mean_reward")
        self.resolver = resolver
        self.shape = InvalidRewardShape(
            float(invalid_reward), graded=graded, attribution=attribution
        )
        self.metric = metric
        self.limits = limits
        self.counts: Counter[str] = Counter()
        self.rewards: list[float | None] = []
        self.packets: Counter[str] = Counter()

    def describe(self) -> dict[str, Any]:
        """What this reward is (kept in the version's metadata and its run identity): two
        versions trained with different rewards must not be mistaken for one another."""
        described: dict[str, Any] = {
            "name": self.__name__,
            "metric": self.metric,
            "invalid_reward": self.shape.invalid_reward,
            "graded": self.shape.graded,
        }
        gate = self.shape.attribution
        if gate is not None:  # named only when set: versions trained before keep their identity
            described["attribution"] = {
                "max_forced_share": gate.max_forced_share,
                "max_patch_alone_success": gate.max_patch_alone_success,
            }
        return described

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kw: Any
    ) -> list[float | None]:
        n = len(completions)
        packet_ids = _per_row(kw, "packet_id", n)
        if any(p is None for p in packet_ids):
            raise ValueError("canary_reward needs a packet_id column (see canary_rows)")
        envs = _per_row(kw, "env", n)
        rewards: list[float | None] = [None] * n
        invalid = 0
        valid: dict[str, list[tuple[int, Candidate]]] = {}
        resolved: dict[str, tuple[CanaryBatch, Evaluator]] = {}
        env_of: list[str] = []
        for i, completion in enumerate(completions):
            packet_id = str(packet_ids[i])
            env = envs[i]
            if env is None:  # no env column: the batch knows it
                if packet_id not in resolved:
                    resolved[packet_id] = self.resolver.resolve(packet_id)
                env = resolved[packet_id][0].env
            env_of.append(str(env))
            sample = EngineerSample(text=completion_text(completion))
            proposal = classify(sample, str(env), i, self.limits)
            if not proposal.valid or proposal.patch is None:
                rewards[i] = self.shape.rejected(proposal.stage, proposal.reason)
                self.counts[f"invalid:{proposal.stage}"] += 1
                invalid += 1
                continue
            valid.setdefault(packet_id, []).append((i, Candidate(f"c{i}", proposal.patch)))
        for packet_id, items in valid.items():
            self.packets[packet_id] += 1
            if packet_id not in resolved:
                resolved[packet_id] = self.resolver.resolve(packet_id)
            batch, runner = resolved[packet_id]
            try:
                report = runner.evaluate(batch, [c for _, c in items])
            except Exception as err:  # noqa: BLE001 - infrastructure: no reward, never a crash
                log.warning(
                    "canary failed; no reward for these completions",
                    packet_id=packet_id,
                    error=f"{type(err).__name__}: {err}",
                )
                self.counts["infra_error"] += len(items)
                continue
            by_id = {r.candidate_id: r for r in report.candidates}
            for i, candidate in items:
                result = by_id.get(candidate.candidate_id)
                self.counts["infra_error" if result is None else result.status] += 1
                if result is not None:
                    rewards[i] = self.shape.of_result(result, self.metric)
        self.rewards.extend(rewards)
        log.info("canary rewards", packet_ids=sorted(set(map(str, packet_ids))),
                 envs=sorted(set(env_of)), rewards=rewards, invalid=invalid)  # fmt: skip
        log_metric = kw.get("log_metric")
        if callable(log_metric) and n:
            log_metric("canary/valid_fraction", 1.0 - invalid / n)
            for env, mean in env_means(env_of, rewards).items():
                log_metric(f"canary/reward_{env}", mean)
        return rewards


def env_means(envs: Sequence[str], rewards: Sequence[float | None]) -> dict[str, float]:
    """Mean reward per env of one call's completions (None rewards left out): a GRPO run that
    trains on several envs' packets logs which env each group drew and how it scored, so its
    curve reads per env."""
    by_env: dict[str, list[float]] = {}
    for env, reward in zip(envs, rewards, strict=True):
        if reward is not None:
            by_env.setdefault(env, []).append(reward)
    return {env: sum(values) / len(values) for env, values in sorted(by_env.items())}


def describe_reward(reward: Any) -> dict[str, Any]:
    """A reward function's own description (`describe()`, as CanaryReward has), else its name."""
    describe = getattr(reward, "describe", None)
    if callable(describe):
        return dict(describe())
    return {"name": getattr(reward, "__name__", type(reward).__name__)}


def reward_counts(reward: Any) -> dict[str, int]:
    """A reward function's tallies (CanaryReward.counts), {} for one without a mapping of
    them: this runs after training, where an odd attribute must not lose the version."""
    counts = getattr(reward, "counts", None)
    if not isinstance(counts, Mapping):
        return {}
    return {str(k): int(v) for k, v in sorted(counts.items(), key=lambda kv: str(kv[0]))}


def canary_rows(
    packets: Sequence[FailurePacket],
    examples: Sequence[PromptExample] | None = None,
    config: PromptConfig | None = None,
) -> list[dict[str, Any]]:
    """The online GRPO dataset: one row per packet, the engineer's prompt (messages) plus the
    columns `CanaryReward` needs."""
    return [
        {
            "prompt": engineer_messages(packet, examples, config),
            "packet_id": packet.packet_id,
            "env": packet.env,
        }
        for packet in packets
    ]
