"""Outcome-based GRPO for the engineer with TRL's `GRPOTrainer`.

The objective (Harness-R1): a patch's reward is the canary's success delta of the frozen target
on its packet's batch (same tasks, same seeds, with vs without the patch); K patches sampled for
one packet form a group; advantages are normalised within the group (TRL's, see
`group_advantages`). Loss: `loss_type="dapo"` (clipped surrogate, token-mean over the batch),
`epsilon=0.2`, `epsilon_high=0.28`, `beta=0` (no KL, no reference model), and
`num_iterations >= 2`: each generated batch is optimised twice or more, so the ratio to the
sampling policy moves away from 1 and the clip acts (with 1 it never does).

Two ways in:
- online (`train_grpo_online`): TRL samples K completions per prompt row; `CanaryReward` parses
  each one (invalid -> the configured reward, 0.0 by default, without running anything) and runs
  the valid ones of a packet together on that packet's batch through the caller's
  `PacketBatchResolver` (packet_id -> batch and runner). Infrastructure failures give None:
  TRL 1.16 turns None into NaN, leaves it out of the group mean and std, and gives that
  completion a zero advantage (`GRPOTrainer._generate_and_score_completions`).
- replay (`train_grpo_replay`): groups the daemon already evaluated (`ReplayGroup`: prompt ids,
  K completions' token ids as sampled, K rewards). They go through TRL's `rollout_func`
  (`ReplayRollout`): each dataset row's prompt is a key (`replay:<group_id>`, a plain string);
  the rollout function answers the K rows of that key with the stored prompt ids, the stored
  completion ids (no re-sampling, no re-tokenising) and the stored rewards as an extra field,
  which `replay_reward` hands back to TRL. TRL then computes the old log-probs, advantages and
  loss on exactly those ids. Caveat: TRL takes the policy at replay time as the behaviour
  policy (the daemon's sampling log-probs are not used), so the first iteration's ratio is 1.

Both publish the trained adapter as the next `engineer/vNNNN/` (see `trainer.versions`), with
metadata (parent version, groups used, mean reward, steps, wall time, tokens/s), and resume an
interrupted run from its last checkpoint.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from harness_r1.contracts import CanaryReport, FailurePacket
from harness_r1.sandbox.canary import CanaryBatch, Candidate
from harness_r1.sandbox.static import StaticLimits
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.errors import TrainingError
from harness_r1.trainer.model_io import (
    LLAMA_LORA_TARGETS,
    load_policy,
    model_fingerprint,
    require_training_stack,
    resolve_base,
)
from harness_r1.trainer.prompt import PromptConfig, PromptExample, engineer_messages
from harness_r1.trainer.propose import classify
from harness_r1.trainer.runs import (
    check_common,
    finish_run,
    identity_settings,
    make_meter,
    run_key,
    run_metadata,
    save_adapter,
    select_run_dir,
)
from harness_r1.trainer.shaping import InvalidRewardShape
from harness_r1.trainer.versions import TrainResult, publish_version

log = structlog.get_logger(__name__)

#: TRL 1.16's loss types of the clipped family (`epsilon`/`epsilon_high` act on them).
CLIPPED_LOSSES = ("dapo", "grpo", "bnpo", "dr_grpo")
SCALE_REWARDS = ("group", "batch", "none")
REPLAY_PREFIX = "replay:"

RewardFunc = Callable[..., list[float | None]]


@dataclass(frozen=True)
class GrpoSettings:
    """GRPO settings (TRL `GRPOConfig` fields in brackets).

    output_root: where `runs/` and `engineer/vNNNN/` go.
    num_generations: K completions per prompt, one group [num_generations].
    groups_per_step: groups in one optimizer step; per-device batch = K * groups_per_step
        [per_device_train_batch_size * gradient_accumulation_steps].
    micro_batch: completions per forward/backward pass (None: the whole step at once). Long
        rows on CPU need 1: with padding in a batch, attention falls back to a kernel that
        keeps seq x seq scores per head and layer for backward (a 4-row batch of ~3.7k-token
        rows would need tens of GB) [per_device_train_batch_size; the rest is accumulated].
    num_iterations: optimizer steps per generated batch [num_iterations]; must be >= 2.
    max_steps: optimizer steps; for replay, <= 0 means one pass over the groups
        (groups // groups_per_step * num_iterations).
    learning_rate: AdamW learning rate of the LoRA weights.
    max_completion_length: tokens sampled per completion (online) [max_completion_length].
    temperature / top_p: sampling (online).
    loss_type / epsilon / epsilon_high / beta / scale_rewards: the objective (see the module).
    invalid_reward: the reward of a completion that does not parse or fails the static checks.
    lora_*: the adapter when training starts from the base model (a parent adapter keeps its own).
    seed, save_steps, save_total_limit, logging_steps, use_cpu, threads: as for SFT.
    shuffle: shuffle the prompt rows / groups [shuffle_dataset].
    """

    output_root: Path = Path("artifacts")
    num_generations: int = 4
    groups_per_step: int = 1
    num_iterations: int = 2
    micro_batch: int | None = None
    max_steps: int = 20
    learning_rate: float = 5e-5
    max_completion_length: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    loss_type: str = "dapo"
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    beta: float = 0.0
    scale_rewards: str = "group"
    invalid_reward: float = 0.0
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = LLAMA_LORA_TARGETS
    seed: int = 0
    save_steps: int = 10
    save_total_limit: int = 2
    logging_steps: int = 1
    use_cpu: bool = True
    threads: int | None = None
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.num_iterations < 2:
            raise ValueError(
                f"num_iterations must be >= 2, got {self.num_iterations}: with 1, TRL computes "
                "the old log-probs from the very policy it is updating, so the importance ratio "
                "is exactly 1, the clip (epsilon, epsilon_high) never acts and the update is a "
                "plain policy gradient; optimise each generated batch at least twice"
            )
        if self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2 (a group needs two completions to have an "
                f"advantage), got {self.num_generations}"
            )
        if self.groups_per_step < 1:
            raise ValueError(f"groups_per_step must be >= 1, got {self.groups_per_step}")
        if self.micro_batch is not None and (
            self.micro_batch < 1 or self.batch_size % self.micro_batch
        ):
            raise ValueError(
                f"micro_batch must divide the step's {self.batch_size} completions, "
                f"got {self.micro_batch}"
            )
        if self.loss_type not in CLIPPED_LOSSES:
            raise ValueError(f"loss_type must be one of {', '.join(CLIPPED_LOSSES)}")
        if not 0 < self.epsilon <= self.epsilon_high:
            raise ValueError("need 0 < epsilon <= epsilon_high")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}")
        if self.max_completion_length < 1:
            raise ValueError("max_completion_length must be >= 1")
        check_common(self)

    @property
    def batch_size(self) -> int:
        return self.num_generations * self.groups_per_step


# -- advantages -----------------------------------------------------------------------------


def group_advantages(
    rewards: Sequence[float | None], eps: float = 1e-4, scale_rewards: str = "group"
) -> list[float]:
    """One group's advantages as TRL 1.16 computes them (`sum_then_normalize`, the default):
    (r - mean) / (std + eps), mean and std over the group's scored completions, std with
    Bessel's correction (`trl.trainer.utils.nanstd`), `scale_rewards="group"` (TRL's default;
    "none" skips the division; "batch" over one group is the same as "group"). A None reward
    (unscorable) is left out of mean and std and gets advantage 0; so does every completion of
    a group with fewer than two scored ones (the std is undefined, TRL's NaN becomes 0)."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}")
    scored = [float(r) for r in rewards if r is not None and not math.isnan(r)]
    if not scored:
        return [0.0 for _ in rewards]
    mean = sum(scored) / len(scored)
    if len(scored) > 1:
        std = math.sqrt(sum((r - mean) ** 2 for r in scored) / (len(scored) - 1))
    else:
        std = math.nan
    out = []
    for reward in rewards:
        if reward is None or math.isnan(reward):
            out.append(0.0)
            continue
        advantage = float(reward) - mean
        if scale_rewards != "none":
            advantage /= std + eps
        out.append(0.0 if math.isnan(advantage) else advantage)
    return out


# -- online: the canary as the reward function ----------------------------------------------


class CanaryEvaluator(Protocol):
    """What the reward needs of a runner (`sandbox.canary.CanaryRunner` is one)."""

    def evaluate(self, batch: CanaryBatch, candidates: Sequence[Candidate]) -> CanaryReport: ...


class PacketBatchResolver(Protocol):
    """Finds the canary batch a packet's patches are judged on, and the runner to judge them:
    the packet's tasks with the seeds they ran with, and a runner for the frozen target.
    Unknown packet ids raise LookupError (a wiring error, never turned into a reward)."""

    def resolve(self, packet_id: str) -> tuple[CanaryBatch, CanaryEvaluator]: ...


@dataclass
class MappingResolver:
    """A PacketBatchResolver over a dict: packet_id -> (batch, runner)."""

    batches: Mapping[str, tuple[CanaryBatch, CanaryEvaluator]]

    def resolve(self, packet_id: str) -> tuple[CanaryBatch, CanaryEvaluator]:
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
    ) -> None:
        if metric not in ("delta_success", "delta_mean_reward"):
            raise ValueError("metric must be delta_success or delta_mean_reward")
        self.resolver = resolver
        self.shape = InvalidRewardShape(float(invalid_reward), graded=graded)
        self.metric = metric
        self.limits = limits
        self.counts: Counter[str] = Counter()
        self.rewards: list[float | None] = []
        self.packets: Counter[str] = Counter()

    def describe(self) -> dict[str, Any]:
        """What this reward is (kept in the version's metadata and its run identity): two
        versions trained with different rewards must not be mistaken for one another."""
        return {
            "name": self.__name__,
            "metric": self.metric,
            "invalid_reward": self.shape.invalid_reward,
            "graded": self.shape.graded,
        }

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
        resolved: dict[str, tuple[CanaryBatch, CanaryEvaluator]] = {}
        for i, completion in enumerate(completions):
            packet_id = str(packet_ids[i])
            env = envs[i]
            if env is None:  # no env column: the batch knows it
                if packet_id not in resolved:
                    resolved[packet_id] = self.resolver.resolve(packet_id)
                env = resolved[packet_id][0].env
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
        log_metric = kw.get("log_metric")
        if callable(log_metric) and n:
            log_metric("canary/valid_fraction", 1.0 - invalid / n)
        return rewards


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


# -- replay: stored groups through rollout_func ---------------------------------------------


def _ids(values: Sequence[Any], what: str) -> tuple[int, ...]:
    ids = tuple(int(v) for v in values)
    if not ids:
        raise ValueError(f"{what} is empty")
    return ids


@dataclass(frozen=True)
class ReplayGroup:
    """K completions the daemon sampled for one prompt and the rewards the canary gave them.

    prompt_ids: the prompt's token ids as the engineer saw them (chat template applied).
    completion_ids: per completion, the sampled ids (through the stop token, if sampled).
    rewards: per completion; None for an infrastructure failure (no learning signal).
    prompt: the prompt messages (provenance only: training uses `prompt_ids`).
    """

    group_id: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[tuple[int, ...], ...]
    rewards: tuple[float | None, ...]
    packet_id: str | None = None
    prompt: tuple[Mapping[str, str], ...] | None = None
    engineer_version: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("a replay group needs a group_id")
        object.__setattr__(self, "prompt_ids", _ids(self.prompt_ids, "prompt_ids"))
        completions = tuple(
            _ids(c, f"completion {i} of group {self.group_id}")
            for i, c in enumerate(self.completion_ids)
        )
        object.__setattr__(self, "completion_ids", completions)
        rewards = tuple(None if r is None else float(r) for r in self.rewards)
        object.__setattr__(self, "rewards", rewards)
        if len(completions) < 2:
            raise ValueError(f"group {self.group_id}: a group needs >= 2 completions")
        if len(rewards) != len(completions):
            raise ValueError(
                f"group {self.group_id}: {len(rewards)} rewards for {len(completions)} completions"
            )

    @property
    def k(self) -> int:
        return len(self.completion_ids)

    @classmethod
    def from_samples(
        cls,
        group_id: str,
        samples: Sequence[EngineerSample],
        rewards: Sequence[float | None],
        **kw: Any,
    ) -> ReplayGroup:
        """From the engineer's samples (their exact ids) and the canary's rewards."""
        prompts = {tuple(s.prompt_ids or ()) for s in samples}
        if len(prompts) != 1 or () in prompts:
            raise ValueError(
                f"group {group_id}: every sample needs the same, known prompt_ids (a backend "
                "that reports token ids: the transformers engineer, or vLLM with token ids)"
            )
        if any(s.completion_ids is None for s in samples):
            raise ValueError(
                f"group {group_id}: a sample has no completion_ids; replay trains on the exact "
                "sampled ids and will not re-tokenise text"
            )
        return cls(
            group_id=group_id,
            prompt_ids=next(iter(prompts)),
            completion_ids=tuple(tuple(s.completion_ids or ()) for s in samples),
            rewards=tuple(rewards),
            **kw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "packet_id": self.packet_id,
            "engineer_version": self.engineer_version,
            "prompt": None if self.prompt is None else [dict(m) for m in self.prompt],
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": [list(c) for c in self.completion_ids],
            "rewards": list(self.rewards),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplayGroup:
        prompt = data.get("prompt")
        return cls(
            group_id=str(data["group_id"]),
            prompt_ids=tuple(data["prompt_ids"]),
            completion_ids=tuple(tuple(c) for c in data["completion_ids"]),
            rewards=tuple(data["rewards"]),
            packet_id=data.get("packet_id"),
            prompt=None if prompt is None else tuple(prompt),
            engineer_version=data.get("engineer_version"),
            meta=dict(data.get("meta") or {}),
        )


def save_replay_groups(path: Path, groups: Sequence[ReplayGroup]) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(g.to_dict()) + "\n" for g in groups))
    tmp.replace(path)


def load_replay_groups(path: Path) -> list[ReplayGroup]:
    groups = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.strip():
            try:
                groups.append(ReplayGroup.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError) as err:
                raise TrainingError(f"{path}:{number}: not a replay group ({err})") from None
    return groups


def replay_key(group_id: str) -> str:
    return REPLAY_PREFIX + group_id


class ReplayRollout:
    """TRL `rollout_func(prompts, trainer) -> dict`: answers each replay key with its stored
    group. TRL hands it the generation batch's prompts, each group's key repeated K times in a
    row (its RepeatSampler); the j-th occurrence of a key gets completion j. Returns
    `prompt_ids`, `completion_ids` (the stored ids), `logprobs` None, and the extra fields
    `replay_reward` / `replay_index` that TRL forwards to the reward function. `served` lists
    (group_id, j) in the order served."""

    def __init__(self, groups: Sequence[ReplayGroup]) -> None:
        by_key: dict[str, ReplayGroup] = {}
        for group in groups:
            key = replay_key(group.group_id)
            if key in by_key:
                raise ValueError(f"duplicate replay group id {group.group_id!r}")
            by_key[key] = group
        self.groups = by_key
        self.served: list[tuple[str, int]] = []

    def __call__(self, prompts: Sequence[Any], trainer: Any = None) -> dict[str, Any]:
        seen: Counter[str] = Counter()
        prompt_ids: list[list[int]] = []
        completion_ids: list[list[int]] = []
        rewards: list[float | None] = []
        indices: list[int] = []
        for prompt in prompts:
            if not isinstance(prompt, str) or prompt not in self.groups:
                raise TrainingError(f"replay rollout got an unknown prompt key: {prompt!r:.80}")
            group = self.groups[prompt]
            j = seen[prompt] % group.k
            seen[prompt] += 1
            prompt_ids.append(list(group.prompt_ids))
            completion_ids.append(list(group.completion_ids[j]))
            rewards.append(group.rewards[j])
            indices.append(j)
            self.served.append((group.group_id, j))
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "replay_reward": rewards,
            "replay_index": indices,
        }


def replay_reward(
    prompts: Sequence[Any], completions: Sequence[Any], **kw: Any
) -> list[float | None]:
    """TRL reward function of replay: the stored rewards the rollout function passed along."""
    rewards = kw.get("replay_reward")
    if rewards is None or len(rewards) != len(completions):
        raise TrainingError("replay_reward needs the replay_reward field of ReplayRollout")
    return [None if r is None else float(r) for r in rewards]


# -- the trainer ----------------------------------------------------------------------------


def grpo_config(settings: GrpoSettings, run_dir: Path, max_steps: int) -> Any:
    from trl import GRPOConfig

    bf16 = False
    if not settings.use_cpu:
        import torch

        bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return GRPOConfig(
        output_dir=str(run_dir),
        max_steps=max_steps,
        num_generations=settings.num_generations,
        per_device_train_batch_size=settings.micro_batch or settings.batch_size,
        gradient_accumulation_steps=settings.batch_size
        // (settings.micro_batch or settings.batch_size),
        num_iterations=settings.num_iterations,
        learning_rate=settings.learning_rate,
        loss_type=settings.loss_type,
        epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high,
        beta=settings.beta,
        scale_rewards=settings.scale_rewards,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        top_p=settings.top_p,
        shuffle_dataset=settings.shuffle,
        remove_unused_columns=False,
        use_cpu=settings.use_cpu,
        bf16=bf16,
        fp16=False,
        gradient_checkpointing=False,
        logging_steps=settings.logging_steps,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.save_total_limit,
        seed=settings.seed,
        data_seed=settings.seed,
        report_to="none",
        disable_tqdm=False,
        log_completions=False,
        dataloader_num_workers=0,
    )


class _Recorder:
    """Wraps a reward function: records what it returns and which packets it scored."""

    def __init__(self, func: RewardFunc, k: int) -> None:
        self.func = func
        self.k = k
        self.rewards: list[float | None] = []
        self.calls = 0
        self.packets: Counter[str] = Counter()
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kw: Any
    ) -> list[float | None]:
        out = list(self.func(prompts=prompts, completions=completions, **kw))
        self.calls += 1
        self.rewards.extend(out)
        for packet_id in (kw.get("packet_id") or [])[:: self.k]:
            self.packets[str(packet_id)] += 1
        return out

    @property
    def groups(self) -> int:
        return len(self.rewards) // self.k

    def mean(self) -> float | None:
        scored = [r for r in self.rewards if r is not None and not math.isnan(r)]
        return sum(scored) / len(scored) if scored else None


def _run(
    *,
    kind: str,
    base: str | Path,
    settings: GrpoSettings,
    adapter: Path | None,
    cache_dir: Path | None,
    rows: list[dict[str, Any]],
    data_identity: str,
    reward: RewardFunc,
    rollout: ReplayRollout | None,
    max_steps: int,
    callbacks: Sequence[Any],
    trainer_cls: type[Any] | None,
    extra: Callable[[_Recorder], dict[str, Any]],
) -> TrainResult:
    require_training_stack()
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOTrainer

    base_dir = resolve_base(base, cache_dir)
    key = run_key(
        {
            "kind": kind,
            "base": model_fingerprint(base_dir),
            "adapter": None if adapter is None else model_fingerprint(Path(adapter)),
            "data": data_identity,
            "settings": identity_settings(settings),
        }
    )
    run_dir, resume = select_run_dir(settings.output_root, kind, key, max_steps)
    log.info(
        f"{kind} run",
        run_dir=str(run_dir),
        resume_from=None if resume is None else resume.name,
        rows=len(rows),
        max_steps=max_steps,
    )
    set_seed(settings.seed)
    model, tokenizer, peft_config = load_policy(base_dir, settings, adapter)
    meter = make_meter()
    recorder = _Recorder(reward, settings.num_generations)
    cls = trainer_cls or GRPOTrainer
    with warnings.catch_warnings():
        # TRL flags rollout_func as experimental; we pin trl==1.16.0, whose API this follows.
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
        trainer = cls(
            model=model,
            reward_funcs=[recorder],
            args=grpo_config(settings, run_dir, max_steps),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[meter, *callbacks],
            rollout_func=rollout,
        )
    output = trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    metadata = run_metadata(
        kind=kind,
        base_dir=base_dir,
        adapter=adapter,
        settings=settings,
        trainer=trainer,
        output=output,
        meter=meter,
        run_dir=run_dir,
        resumed_from=resume,
        extra={
            "groups_used": recorder.groups,
            "mean_reward": recorder.mean(),
            "rewards_none": sum(1 for r in recorder.rewards if r is None),
            "generation_rounds": recorder.calls,
            **extra(recorder),
        },
    )
    result = publish_version(settings.output_root, save_adapter(trainer, tokenizer), metadata)
    finish_run(run_dir, result)
    return result


def train_grpo_online(
    rows: Sequence[Mapping[str, Any]],
    reward: RewardFunc,
    base: str | Path = "smollm2",
    settings: GrpoSettings | None = None,
    *,
    adapter: Path | None = None,
    cache_dir: Path | None = None,
    callbacks: Sequence[Any] = (),
    trainer_cls: type[Any] | None = None,
) -> TrainResult:
    """GRPO that samples: TRL draws K completions per row (`prompt`: messages) and scores them
    with `reward` (a `CanaryReward` in production; any TRL reward function works). `adapter`
    starts from a published version (the SFT one), which becomes the parent. `trainer_cls`: a
    GRPOTrainer subclass (instrumentation)."""
    settings = settings or GrpoSettings()
    if settings.max_steps <= 0:
        raise ValueError("online GRPO needs max_steps > 0")
    data = [dict(row) for row in rows]
    if len(data) < settings.groups_per_step:
        raise TrainingError(
            f"{len(data)} prompt rows cannot fill {settings.groups_per_step} groups per step"
        )
    if any("prompt" not in row for row in data):
        raise TrainingError("every row needs a prompt (a list of messages)")
    return _run(
        kind="grpo",
        base=base,
        settings=settings,
        adapter=adapter,
        cache_dir=cache_dir,
        rows=data,
        data_identity=run_key({"rows": data, "reward": describe_reward(reward)}),
        reward=reward,
        rollout=None,
        max_steps=settings.max_steps,
        callbacks=callbacks,
        trainer_cls=trainer_cls,
        extra=lambda recorder: {
            "mode": "online",
            "rows": len(data),
            "packets": dict(sorted(recorder.packets.items())),
            "reward": describe_reward(reward),
            "reward_counts": reward_counts(reward),
        },
    )


def replay_steps(groups: int, settings: GrpoSettings) -> int:
    """Optimizer steps of one pass over `groups` stored groups."""
    return (groups // settings.groups_per_step) * settings.num_iterations


def train_grpo_replay(
    groups: Sequence[ReplayGroup],
    base: str | Path = "smollm2",
    settings: GrpoSettings | None = None,
    *,
    adapter: Path | None = None,
    cache_dir: Path | None = None,
    callbacks: Sequence[Any] = (),
    trainer_cls: type[Any] | None = None,
) -> TrainResult:
    """GRPO on groups the daemon already evaluated, trained on exactly their stored token ids
    and rewards (see the module docstring). Every group must have K = num_generations
    completions."""
    settings = settings or GrpoSettings()
    groups = list(groups)
    wrong = [g.group_id for g in groups if g.k != settings.num_generations]
    if wrong:
        raise TrainingError(
            f"groups {', '.join(wrong[:5])} do not have num_generations="
            f"{settings.num_generations} completions"
        )
    if len(groups) < settings.groups_per_step:
        raise TrainingError(
            f"{len(groups)} groups cannot fill {settings.groups_per_step} groups per step"
        )
    rollout = ReplayRollout(groups)
    rows = [{"prompt": replay_key(g.group_id), "group_id": g.group_id} for g in groups]
    max_steps = (
        settings.max_steps if settings.max_steps > 0 else replay_steps(len(groups), settings)
    )
    return _run(
        kind="grpo-replay",
        base=base,
        settings=settings,
        adapter=adapter,
        cache_dir=cache_dir,
        rows=rows,
        data_identity=run_key({"groups": [g.to_dict() for g in groups]}),
        reward=replay_reward,
        rollout=rollout,
        max_steps=max_steps,
        callbacks=callbacks,
        trainer_cls=trainer_cls,
        extra=lambda recorder: {
            "mode": "replay",
            "groups_available": len(groups),
            "group_ids": sorted({gid for gid, _ in rollout.served}),
            "engineer_versions": sorted(
                {g.engineer_version for g in groups if g.engineer_version is not None}
            ),
        },
    )


__all__ = [
    "CanaryEvaluator",
    "CanaryReward",
    "GrpoSettings",
    "MappingResolver",
    "PacketBatchResolver",
    "ReplayGroup",
    "ReplayRollout",
    "canary_rows",
    "group_advantages",
    "load_replay_groups",
    "replay_reward",
    "replay_steps",
    "save_replay_groups",
    "train_grpo_online",
    "train_grpo_replay",
]
