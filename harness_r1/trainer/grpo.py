"""Outcome-based GRPO for the engineer with TRL's `GRPOTrainer`.

The objective (Harness-R1): a patch's reward is the canary's success delta of the frozen target
on its packet's batch (same tasks, same seeds, with vs without the patch); K patches sampled for
one packet form a group; advantages are normalised within the group (TRL's, see
`group_advantages`). Loss: `loss_type="dapo"` (clipped surrogate, token-mean over the batch),
`epsilon=0.2`, `epsilon_high=0.28`, `beta=0` (no KL, no reference model), and
`num_iterations >= 2`: each generated batch is optimised twice or more, so the ratio to the
sampling policy moves away from 1 and the clip acts (with 1 it never does).

Two ways in (the reward and the replay format live beside this module: `trainer.canary_reward`,
`trainer.replay`):
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

Why one module: the two ways in share the trainer's construction, the loss settings and the
versioned output, so online and replay GRPO stay one objective.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.canary_reward import describe_reward, reward_counts
from harness_r1.trainer.errors import TrainingError, TrainingPaused
from harness_r1.trainer.model_io import (
    LLAMA_LORA_TARGETS,
    load_policy,
    model_fingerprint,
    require_training_stack,
    resolve_base,
)
from harness_r1.trainer.replay import ReplayGroup, ReplayRollout, replay_key, replay_reward
from harness_r1.trainer.runs import (
    RUN_RECORD,
    adapter_identity,
    check_common,
    checkpoint_step,
    finish_run,
    identity_settings,
    later_checkpoint,
    make_meter,
    make_time_budget,
    run_key,
    run_metadata,
    save_adapter,
    select_run_dir,
    use_bf16,
)
from harness_r1.trainer.versions import TrainResult, publish_version

log = structlog.get_logger(__name__)

#: TRL 1.16's loss types of the clipped family (`epsilon`/`epsilon_high` act on them).
CLIPPED_LOSSES = ("dapo", "grpo", "bnpo", "dr_grpo")
SCALE_REWARDS = ("group", "batch", "none")

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
    seed, save_steps, save_total_limit, logging_steps, use_cpu, threads, cpu_bf16: as for SFT.
    shuffle: shuffle the prompt rows / groups [shuffle_dataset].
    stop_after_s: a time budget for this invocation (None: none): the run saves a checkpoint
        and stops at the end of a generation cycle before it would overrun it, publishes
        nothing and raises `TrainingPaused`; the same call continues it (not part of the run's
        identity).
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
    stop_after_s: float | None = None
    cpu_bf16: bool = False

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
        if self.stop_after_s is not None and self.stop_after_s <= 0:
            raise ValueError(f"stop_after_s must be > 0, got {self.stop_after_s}")
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


# -- replay: stored groups through rollout_func ---------------------------------------------


# -- the trainer ----------------------------------------------------------------------------


def grpo_config(settings: GrpoSettings, run_dir: Path, max_steps: int) -> Any:
    from trl import GRPOConfig

    bf16 = use_bf16(settings.use_cpu, settings.cpu_bf16)
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
    """Wraps a reward function: records what it returns and which packets it scored, over the
    whole run: its record is saved into every checkpoint (`RUN_RECORD`) and taken back on
    resume, so a run paused and continued (on this host or another) publishes the metadata of
    all its steps, not only of its last invocation. A checkpoint saved mid generation cycle
    (`save_steps` not a multiple of `num_iterations`; the time budget pauses only at a cycle's
    end) holds a group TRL samples again after the resume: that group is then counted twice.
    The reward function's tallies are its own since it was made (one per process, as the CLI
    does) plus the record's."""

    def __init__(self, func: RewardFunc, k: int) -> None:
        self.func = func
        self.k = k
        self.rewards: list[float | None] = []
        self.calls = 0
        self.packets: Counter[str] = Counter()
        self.earlier_counts: Counter[str] = Counter()  # the reward's tallies before a resume
        self.since_step = 0  # the first step recorded: > 0 after a resume without a record
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

    def reward_counts(self) -> dict[str, int]:
        """The reward function's tallies over the whole run."""
        total = self.earlier_counts + Counter(reward_counts(self.func))
        return dict(sorted(total.items()))

    def save(self, checkpoint: Path) -> None:
        """Write the record beside the checkpoint's state (whole or not at all: a temporary
        file renamed, so a kill mid-write leaves no torn record)."""
        record = {
            "since_step": self.since_step,
            "rewards": [None if r is None or math.isnan(r) else float(r) for r in self.rewards],
            "calls": self.calls,
            "packets": dict(self.packets),
            "reward_counts": self.reward_counts(),
        }
        partial = checkpoint / f"{RUN_RECORD}.partial"
        partial.write_text(json.dumps(record), encoding="utf-8")
        partial.replace(checkpoint / RUN_RECORD)

    def resume(self, checkpoint: Path | None) -> None:
        """Take back what the run recorded up to `checkpoint`; without a readable record (a
        checkpoint saved before records were kept) start recording at its step, and say so."""
        if checkpoint is None:
            return
        try:
            record = json.loads((checkpoint / RUN_RECORD).read_text(encoding="utf-8"))
            rewards = [None if r is None else float(r) for r in record["rewards"]]
            packets = Counter({str(k): int(v) for k, v in record["packets"].items()})
            counts = Counter({str(k): int(v) for k, v in record["reward_counts"].items()})
            since, calls = int(record["since_step"]), int(record["calls"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.since_step = checkpoint_step(checkpoint)
            log.warning("grpo_run_record_unreadable", checkpoint=str(checkpoint), error=str(exc))
            return
        self.since_step, self.rewards, self.calls = since, rewards, calls
        self.packets, self.earlier_counts = packets, counts

    def metadata(self) -> dict[str, Any]:
        return {
            "groups_used": self.groups,
            "mean_reward": self.mean(),
            "rewards_none": sum(1 for r in self.rewards if r is None or math.isnan(r)),
            "generation_rounds": self.calls,
            "recorded_since_step": self.since_step,
        }


def _record_saver(recorder: _Recorder) -> Any:
    """A TrainerCallback writing the recorder's record into each checkpoint the Trainer saves
    (`on_save` runs after the checkpoint folder is written)."""
    from transformers import TrainerCallback

    class RecordSaver(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if checkpoint.is_dir():
                recorder.save(checkpoint)

    return RecordSaver()


@dataclass(frozen=True)
class _Job:
    """What one GRPO mode trains on: its rows, their identity (the run key), how completions
    are rewarded and where they come from (`rollout` None: TRL samples them), its step count
    and the mode's own metadata."""

    kind: str
    rows: list[dict[str, Any]]
    data_identity: str
    reward: RewardFunc
    rollout: ReplayRollout | None
    max_steps: int
    extra: Callable[[_Recorder], dict[str, Any]]


@dataclass(frozen=True)
class _Start:
    """Where a run starts from and how it is driven: the base model, the settings, the
    adapter to continue, the model cache, TRL callbacks, a GRPOTrainer subclass and a
    checkpoint of an earlier invocation to resume from (another host's: its run directory is
    not here)."""

    base: str | Path
    settings: GrpoSettings
    adapter: Path | None
    cache_dir: Path | None
    callbacks: Sequence[Any]
    trainer_cls: type[Any] | None
    resume_from: Path | None = None


def _run(job: _Job, start: _Start) -> TrainResult:
    require_training_stack()
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOTrainer

    base_dir = resolve_base(start.base, start.cache_dir)
    key = run_key(
        {
            "kind": job.kind,
            "base": model_fingerprint(base_dir),
            "adapter": adapter_identity(start.adapter),
            "data": job.data_identity,
            "settings": identity_settings(start.settings),
        }
    )
    run_dir, resume = select_run_dir(start.settings.output_root, job.kind, key, job.max_steps)
    resume = later_checkpoint(resume, start.resume_from)
    log.info(
        f"{job.kind} run",
        run_dir=str(run_dir),
        resume_from=None if resume is None else resume.name,
        rows=len(job.rows),
        max_steps=job.max_steps,
    )
    set_seed(start.settings.seed)
    model, tokenizer, peft_config = load_policy(base_dir, start.settings, start.adapter)
    meter = make_meter()
    recorder = _Recorder(job.reward, start.settings.num_generations)
    recorder.resume(resume)
    callbacks = [meter, _record_saver(recorder), *start.callbacks]
    budget = None
    if start.settings.stop_after_s is not None:
        budget = make_time_budget(start.settings.stop_after_s, cycle=start.settings.num_iterations)
        callbacks.append(budget)
    cls = start.trainer_cls or GRPOTrainer
    with warnings.catch_warnings():
        # TRL flags rollout_func as experimental; we pin trl==1.16.0, whose API this follows.
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
        trainer = cls(
            model=model,
            reward_funcs=[recorder],
            args=grpo_config(start.settings, run_dir, job.max_steps),
            train_dataset=Dataset.from_list(job.rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=callbacks,
            rollout_func=job.rollout,
        )
    output = trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    if budget is not None and budget.stopped_at is not None:  # checkpoint saved, not published
        checkpoint = run_dir / f"checkpoint-{budget.stopped_at}"
        raise TrainingPaused(run_dir, checkpoint, budget.stopped_at, job.max_steps)
    metadata = run_metadata(
        kind=job.kind,
        base_dir=base_dir,
        adapter=start.adapter,
        settings=start.settings,
        trainer=trainer,
        output=output,
        meter=meter,
        run_dir=run_dir,
        resumed_from=resume,
        extra={**recorder.metadata(), **job.extra(recorder)},
    )
    result = publish_version(start.settings.output_root, save_adapter(trainer), metadata)
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
    resume_from: Path | None = None,
) -> TrainResult:
    """GRPO that samples: TRL draws K completions per row (`prompt`: messages) and scores them
    with `reward` (a `CanaryReward` in production; any TRL reward function works). `adapter`
    starts from a published version (the SFT one), which becomes the parent. `trainer_cls`: a
    GRPOTrainer subclass (instrumentation). `resume_from`: a checkpoint a paused run saved
    (`TrainingPaused.checkpoint`), possibly on another host, to continue from (its optimizer,
    scheduler, RNG and step); the run directory's own checkpoint wins when it is further."""
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
    job = _Job(
        kind="grpo",
        rows=data,
        data_identity=run_key({"rows": data, "reward": describe_reward(reward)}),
        reward=reward,
        rollout=None,
        max_steps=settings.max_steps,
        extra=lambda recorder: {
            "mode": "online",
            "rows": len(data),
            "packets": dict(sorted(recorder.packets.items())),
            "reward": describe_reward(reward),
            "reward_counts": recorder.reward_counts(),
        },
    )
    start = _Start(base, settings, adapter, cache_dir, callbacks, trainer_cls, resume_from)
    return _run(job, start)


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
    job = _Job(
        kind="grpo-replay",
        rows=rows,
        data_identity=run_key({"groups": [g.to_dict() for g in groups]}),
        reward=replay_reward,
        rollout=rollout,
        max_steps=max_steps,
        extra=lambda recorder: {
            "mode": "replay",
            "groups_available": len(groups),
            "group_ids": sorted({gid for gid, _ in rollout.served}),
            "engineer_versions": sorted(
                {g.engineer_version for g in groups if g.engineer_version is not None}
            ),
        },
    )
    return _run(job, _Start(base, settings, adapter, cache_dir, callbacks, trainer_cls))


__all__ = [
    "GrpoSettings",
    "grpo_config",
    "group_advantages",
    "replay_steps",
    "train_grpo_online",
    "train_grpo_replay",
]
