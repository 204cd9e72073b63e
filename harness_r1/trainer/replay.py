"""The replay-group format: what the daemon writes for every evaluated batch and GRPO's replay
mode trains on (`ReplayGroup`: prompt ids, K completions' token ids as sampled, K rewards), and
the TRL `rollout_func` that answers a group's rows with exactly those ids and rewards
(`ReplayRollout`, `replay_reward`). The daemon imports this module, not the trainer."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.errors import TrainingError

log = structlog.get_logger(__name__)


REPLAY_PREFIX = "replay:"


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
