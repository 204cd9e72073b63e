"""The deterministic failure-packet extractor: a batch of trajectories -> one FailurePacket.

Rules (each one is what a reader of a packet may rely on):
1. A batch is one (env, target, harness_version); anything else is a ValueError. Trajectories
   are deduplicated by trajectory_id (identical copies dropped, different contents under one
   id rejected) and sorted, so the input order never matters.
2. Failed episodes are those with success false or reward < 1.
3. Selection, `round_robin`: task types in sorted order, one episode per type per round; within
   a type lowest reward first, then trajectory_id. `lowest_reward`: reward ascending, ties by
   task type, then trajectory_id.
4. Episodes are added in that order while the whole packet (its canonical JSON, packet_id
   included) stays within `token_budget` approximate tokens (`approx_tokens`: ceil(chars / 4))
   and `max_episodes`; the first episode that would exceed the budget stops the selection. The
   first episode alone is shrunk (its earliest snippets dropped) rather than dropped; if even
   that does not fit, ValueError.
5. Per episode: masked task id (T1, T2... per distinct task in selection order), task type,
   instruction and snippets with ids masked, constraints and masking as in constraints.py,
   outcome, failure point and snippets: `snippet_window` steps before the failure point, the
   failure point, `snippet_after` steps after it, and, for an episode that ended in `failure`
   (its last action decided it, e.g. a wrong answer or purchase), its last step. The failure
   point is the first step of the longest streak of repeated/invalid actions, or the last step
   when there is none (then the last `snippet_window + 1` steps are shown). Each action and
   observation (the env's feedback to the action) is cut to its maximum length, and a cut text
   ends with the marker ` ...[N chars cut]`.
6. Signals are counted over the selected episodes (rules: signals.py).
7. packet_id = sha256 of the canonical JSON (sorted keys, no spaces, UTF-8) of the packet
   without packet_id. Same input -> byte-identical `to_json_bytes()`.
8. The incumbent (the live overlay's hooks, given by the caller per hook as its links' sources,
   oldest first) comes before any episode and takes at most `incumbent_share` of the budget:
   every hook whole when they all fit (as JSON), else each hook cut to an equal part of that
   share (its newest links are at the end, so a cut drops those first: a link the engineer
   cannot see whole is one it should replace, not add to). Episodes fill what is left.
9. `rules` says whether rules written for the env made the packet (the built-in envs) or the
   generic ones (any other env, e.g. a plugin's): generic invalid-action markers, no task
   constraints. The engineer's prompt repeats it, so a model never reads a missing signal as
   "nothing went wrong".
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from harness_r1.consumers.constraints import IdMasker, task_constraints
from harness_r1.consumers.signals import (
    INVALID_RULES,
    count_signals,
    episode_flags,
    failure_point,
)
from harness_r1.contracts import (
    FailurePacket,
    HookName,
    IncumbentHook,
    PacketEpisode,
    RuntimeSignals,
    Snippet,
    Termination,
    Trajectory,
)

Selection = Literal["round_robin", "lowest_reward"]
SELECTIONS: tuple[str, ...] = ("round_robin", "lowest_reward")
CUT_MARKER = " ...[{n} chars cut]"
_ID_PLACEHOLDER = "0" * 64  # packet_id's length, so budget checks measure the final size


class NoFailures(ValueError):
    """The batch has no failed episode: there is nothing to put in a packet."""


@dataclass(frozen=True)
class PacketConfig:
    """How a packet is drawn from a batch.

    token_budget: the most approximate tokens (characters of the packet's JSON / 4, rounded
        up) the whole packet may take.
    selection: "round_robin" over task types, or "lowest_reward" first.
    max_episodes: the most episodes in one packet.
    snippet_window: steps shown before the failure point.
    snippet_after: steps shown after the failure point.
    max_action_chars / max_observation_chars: the longest action / observation text kept per
        snippet; longer texts are cut and marked.
    """

    token_budget: int = 4000
    selection: Selection = "round_robin"
    max_episodes: int = 8
    snippet_window: int = 3
    snippet_after: int = 1
    max_action_chars: int = 240
    max_observation_chars: int = 400
    incumbent_share: float = 0.4

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, not {self.selection!r}")
        if self.token_budget < 1 or self.max_episodes < 1:
            raise ValueError("token_budget and max_episodes must be >= 1")
        if self.snippet_window < 0 or self.snippet_after < 0:
            raise ValueError("snippet_window and snippet_after must be >= 0")
        if self.max_action_chars < 1 or self.max_observation_chars < 1:
            raise ValueError("max_action_chars and max_observation_chars must be >= 1")
        if not 0.0 < self.incumbent_share < 1.0:
            raise ValueError("incumbent_share must be in (0, 1)")


def approx_tokens(text: str) -> int:
    """Approximate token count: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


def cut(text: str, limit: int) -> str:
    """`text` if it has at most `limit` characters, else its first `limit` plus the marker."""
    if len(text) <= limit:
        return text
    return text[:limit] + CUT_MARKER.format(n=len(text) - limit)


def is_failure(trajectory: Trajectory) -> bool:
    return not trajectory.outcome.success or trajectory.outcome.reward < 1


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def packet_hash(packet: FailurePacket) -> str:
    """sha256 of the canonical JSON of the packet without packet_id."""
    return hashlib.sha256(
        canonical_json(packet.model_dump(mode="json", exclude={"packet_id"}))
    ).hexdigest()


def _batch(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """Checked, deduplicated, sorted by trajectory_id."""
    by_id: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        seen = by_id.get(trajectory.trajectory_id)
        if seen is not None and seen != trajectory:
            raise ValueError(
                f"two different trajectories share trajectory_id {trajectory.trajectory_id!r}"
            )
        by_id[trajectory.trajectory_id] = trajectory
    if not by_id:
        raise ValueError("empty batch: a packet needs at least one trajectory")
    batch = [by_id[key] for key in sorted(by_id)]
    keys = {batch_key(t) for t in batch}
    if len(keys) > 1:
        listed = "; ".join(f"env={e} target={m}@{v} harness={h}" for e, m, v, h in sorted(keys))
        raise ValueError(
            f"a batch must share env, target and harness version; this one mixes {listed}"
        )
    return batch


def select_order(failures: Sequence[Trajectory], selection: Selection) -> list[Trajectory]:
    """All failed episodes in the order the selection rule takes them (rule 3)."""
    if selection == "lowest_reward":
        return sorted(
            failures,
            key=lambda t: (t.outcome.reward, t.task.task_type, t.trajectory_id),
        )
    by_type: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in failures:
        by_type[trajectory.task.task_type].append(trajectory)
    queues = [
        sorted(by_type[kind], key=lambda t: (t.outcome.reward, t.trajectory_id))
        for kind in sorted(by_type)
    ]
    order: list[Trajectory] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        order.extend(queue[depth] for queue in queues if depth < len(queue))
    return order


def _snippet_indices(
    trajectory: Trajectory,
    step: int | None,
    streak: int,
    config: PacketConfig,
) -> list[int]:
    if step is None:
        return []
    last = len(trajectory.steps) - 1
    first = max(0, step - config.snippet_window)
    end = min(last, step + config.snippet_after) if streak else last
    indices = list(range(first, end + 1))
    if trajectory.outcome.termination == Termination.FAILURE and last not in indices:
        indices.append(last)
    return indices


def _episode(
    trajectory: Trajectory,
    alias: str,
    masker: IdMasker,
    config: PacketConfig,
    drop_first: int = 0,
) -> PacketEpisode:
    flags = episode_flags(trajectory)
    point = failure_point(flags)
    indices = _snippet_indices(trajectory, point.step, point.streak, config)[drop_first:]
    snippets = []
    for index in indices:
        step = trajectory.steps[index]
        snippets.append(
            Snippet(
                step=step.index,
                action=cut(masker(step.action), config.max_action_chars),
                observation=cut(masker(step.feedback), config.max_observation_chars),
                flags=flags[index],
            )
        )
    task = trajectory.task
    return PacketEpisode(
        masked_task_id=alias,
        task_type=task.task_type,
        instruction=masker(task.instruction),
        constraints=[
            masker(c) for c in task_constraints(task.env, task.task_type, task.instruction)
        ],
        success=trajectory.outcome.success,
        reward=trajectory.outcome.reward,
        termination=trajectory.outcome.termination,
        steps=trajectory.outcome.steps,
        snippets=snippets,
        failure_step=point.step,
        failure_streak=point.streak,
    )


def _assemble(
    batch: Sequence[Trajectory],
    failures: Sequence[Trajectory],
    chosen: Sequence[Trajectory],
    episodes: Sequence[PacketEpisode],
    config: PacketConfig,
    packet_id: str = _ID_PLACEHOLDER,
    incumbent: Sequence[IncumbentHook] = (),
) -> FailurePacket:
    head = batch[0]
    signals = count_signals(chosen) if chosen else RuntimeSignals()
    return FailurePacket(
        packet_id=packet_id,
        env=head.env,
        target=head.target,
        harness_version=head.harness_version,
        selection=config.selection,
        token_budget=config.token_budget,
        episodes=list(episodes),
        signals=signals,
        batch_size=len(batch),
        failures=len(failures),
        incumbent=list(incumbent),
        rules=packet_rules(head.env),
    )


def packet_rules(env: str) -> Literal["env", "generic"]:
    """`env` where rules were written for the env (rule 9), else `generic`."""
    return "env" if env in INVALID_RULES else "generic"


#: Per hook, the live links' sources, oldest first (str keys work too: HookName is a str).
IncumbentSources = Mapping[HookName, Sequence[str]]


def incumbent_hooks(sources: IncumbentSources, config: PacketConfig) -> list[IncumbentHook]:
    """The incumbent's hooks within `incumbent_share` of the budget (rule 8)."""
    texts = {}
    for hook in HookName:
        codes = sources.get(hook)
        if codes:
            texts[hook] = (len(codes), _linked(codes))
    if not texts:
        return []
    share = int(config.token_budget * config.incumbent_share * 4)  # approx_tokens: chars / 4
    if sum(_json_chars(text) for _, text in texts.values()) > share:
        each = share // len(texts)
        texts = {hook: (n, _cut_json(text, each)) for hook, (n, text) in texts.items()}
    return [IncumbentHook(hook=hook, links=n, code=text) for hook, (n, text) in texts.items()]


def _linked(codes: Sequence[str]) -> str:
    return "\n".join(
        f"# link {i} of {len(codes)}\n{code.strip()}" for i, code in enumerate(codes, start=1)
    )


def _json_chars(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False))


def _cut_json(text: str, limit: int) -> str:
    """`text` cut (with the marker) so that its JSON string takes at most ~`limit` chars."""
    keep = max(limit - 40, 0)
    while keep > 0 and _json_chars(cut(text, keep)) > limit:
        keep = keep * 9 // 10
    return cut(text, keep)


def packet_tokens(packet: FailurePacket) -> int:
    """The approximate tokens of a packet's bytes (what the budget bounds)."""
    return approx_tokens(packet.to_json_bytes().decode("utf-8"))


def build_packet(
    trajectories: Iterable[Trajectory],
    config: PacketConfig | None = None,
    incumbent: IncumbentSources | None = None,
) -> FailurePacket:
    """One packet from one batch (see the module docstring for every rule); `incumbent`: the
    live overlay's hooks, per hook its links' sources, oldest first."""
    config = config or PacketConfig()
    live = incumbent_hooks(incumbent or {}, config)
    batch = _batch(trajectories)
    failures = [t for t in batch if is_failure(t)]
    if not failures:
        raise NoFailures(f"no failed episode among the {len(batch)} of this batch")
    order = select_order(failures, config.selection)
    aliases: dict[str, str] = {}
    for trajectory in order[: config.max_episodes]:
        aliases.setdefault(trajectory.task.task_id, f"T{len(aliases) + 1}")
    masker = IdMasker(
        batch[0].env,
        aliases,
        (t.task.task_id for t in batch),
        (t.trajectory_id for t in batch),
    )
    chosen: list[Trajectory] = []
    episodes: list[PacketEpisode] = []
    for trajectory in order[: config.max_episodes]:
        alias = aliases[trajectory.task.task_id]
        saved = dict(masker.asin_aliases)
        episode = _episode(trajectory, alias, masker, config)
        fits = _fits(batch, failures, [*chosen, trajectory], [*episodes, episode], config, live)
        drop = 0
        while not fits and not episodes and drop < len(episode.snippets) - 1:
            drop += 1  # the first episode is shrunk rather than dropped (rule 4)
            masker.asin_aliases = dict(saved)
            episode = _episode(trajectory, alias, masker, config, drop_first=drop)
            fits = _fits(batch, failures, [trajectory], [episode], config, live)
        if not fits:
            masker.asin_aliases = saved
            if not episodes:
                needed = packet_tokens(
                    _assemble(batch, failures, [trajectory], [episode], config, incumbent=live)
                )
                raise ValueError(
                    f"token_budget {config.token_budget} is too small for even one episode "
                    f"(the smallest packet takes {needed} approximate tokens)"
                )
            break
        chosen.append(trajectory)
        episodes.append(episode)
    draft = _assemble(batch, failures, chosen, episodes, config, incumbent=live)
    return draft.model_copy(update={"packet_id": packet_hash(draft)})


def _fits(
    batch: Sequence[Trajectory],
    failures: Sequence[Trajectory],
    chosen: Sequence[Trajectory],
    episodes: Sequence[PacketEpisode],
    config: PacketConfig,
    incumbent: Sequence[IncumbentHook] = (),
) -> bool:
    packet = _assemble(batch, failures, chosen, episodes, config, incumbent=incumbent)
    return packet_tokens(packet) <= config.token_budget


def read_trajectories(path: Path | str) -> list[Trajectory]:
    """Every Trajectory of a JSONL file (blank lines skipped); a bad line is a ValueError that
    names the file and the line."""
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.model_validate_json(line))
            except ValidationError as err:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or '<line>'}: {e['msg']}"
                    for e in err.errors()[:3]
                )
                raise ValueError(f"{path}:{number}: not a valid Trajectory: {problems}") from None
    return out


def batch_key(trajectory: Trajectory) -> tuple[str, str, str, str]:
    return (
        trajectory.env,
        trajectory.target.model_id,
        trajectory.target.version,
        trajectory.harness_version,
    )


def build_packets(
    trajectories: Iterable[Trajectory], config: PacketConfig | None = None
) -> list[FailurePacket]:
    """One packet per (env, target, harness_version) group that has a failed episode, in
    sorted group order; groups without a failure yield no packet."""
    groups: dict[tuple[str, str, str, str], list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        groups[batch_key(trajectory)].append(trajectory)
    packets = []
    for key in sorted(groups):
        try:
            packets.append(build_packet(groups[key], config))
        except NoFailures:
            continue
    return packets


def build_packet_from_jsonl(
    path: Path | str, config: PacketConfig | None = None
) -> list[FailurePacket]:
    """Packets for every batch group of a JSONL file of trajectories (see `build_packets`)."""
    return build_packets(read_trajectories(path), config)
