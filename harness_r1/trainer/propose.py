"""K candidate patches for one failure packet: sample, then classify each through the intake.

Each sample goes once through the sandbox's intake (`sandbox.intake.take_in`), with the
template library's calls rendered by `template_calls`: a proposal is `valid` when its text
parses (or renders) into a Patch for the packet's env, writes only the hooks allowed and passes
every static check. Otherwise `stage` says where it failed ("parse", "scope" or "static") and
`reason` carries the stable code (a ParseCode, `hook_not_allowed`, `bad_template_call` or the
first static violation's Code). Valid proposals still have to run in the isolated worker and
the canary; that is not done here.

`propose_command` is what `harness-r1 engineer propose PACKET -k 4` runs: PACKET is a
FailurePacket JSON file, or a trajectories JSONL file whose first packet is built.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness_r1.consumers import PacketConfig, build_packet_from_jsonl
from harness_r1.contracts import FailurePacket, HookName
from harness_r1.sandbox import Intake, StaticLimits, take_in
from harness_r1.trainer.engineer import (
    DEFAULT_MAX_NEW_TOKENS,
    EngineerBackend,
    EngineerSample,
    EngineerSpec,
    build_engineer,
)
from harness_r1.trainer.prompt import engineer_messages
from harness_r1.trainer.prompt_config import PromptConfig
from harness_r1.trainer.prompt_examples import PromptExample
from harness_r1.trainer.template_calls import template_call


@dataclass(frozen=True, kw_only=True)
class Proposal(Intake):
    """One sampled completion and what the sandbox's intake made of it (`Intake`'s fields)."""

    index: int
    sample: EngineerSample

    @property
    def text(self) -> str:
        return self.sample.text

    @property
    def completion_ids(self) -> list[int] | None:
        return self.sample.completion_ids

    @property
    def prompt_ids(self) -> list[int] | None:
        return self.sample.prompt_ids

    def to_dict(self, *, token_ids: bool = True) -> dict[str, Any]:
        sample = self.sample
        out: dict[str, Any] = {
            "index": self.index,
            "valid": self.valid,
            "stage": self.stage,
            "reason": self.reason,
            "message": self.message,
            "codes": list(self.codes),
            "notes": list(self.notes),
            "patch": None if self.patch is None else self.patch.model_dump(mode="json"),
            "patch_sha256": None if self.patch is None else self.patch.sha256(),
            "text": sample.text,
            "finish_reason": sample.finish_reason,
            "completion_tokens": sample.completion_tokens,
            "prompt_tokens": sample.prompt_tokens,
            "tokens_exact": sample.tokens_exact,
        }
        if token_ids:
            out["completion_ids"] = sample.completion_ids
            out["prompt_ids"] = sample.prompt_ids
        return out


def classify(
    sample: EngineerSample,
    env: str,
    index: int = 0,
    limits: StaticLimits | None = None,
    hooks: Collection[HookName] = tuple(HookName),
) -> Proposal:
    """One sample through the sandbox's intake (`sandbox.intake.take_in`), with the template
    library's calls rendered (`template_calls`); `hooks`: the hooks this engineer may write.
    Never raises (no layer does)."""
    taken = take_in(sample.text, env, limits=limits, hooks=hooks, render_call=template_call)
    return Proposal(
        index=index, sample=sample, **{f.name: getattr(taken, f.name) for f in fields(taken)}
    )


def propose_patches(
    packet: FailurePacket,
    backend: EngineerBackend,
    k: int,
    seed: int = 0,
    temperature: float = 1.0,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    examples: Sequence[PromptExample] | None = None,
    config: PromptConfig | None = None,
) -> list[Proposal]:
    """K samples for the packet's prompt, each classified valid / parse failure / static
    rejection (static limits from `config.limits`)."""
    config = config or PromptConfig()
    messages = engineer_messages(packet, examples, config)
    samples = backend.propose(
        messages, k, temperature=temperature, seed=seed, max_new_tokens=max_new_tokens
    )
    return [
        classify(sample, packet.env, index, config.limits, config.hooks)
        for index, sample in enumerate(samples)
    ]


def load_packet(path: Path, packet_config: PacketConfig | None = None) -> FailurePacket:
    """A FailurePacket JSON file, or the first packet built from a trajectories JSONL file."""
    path = Path(path)
    if path.suffix != ".jsonl":
        text = path.read_text(encoding="utf-8")
        try:
            return FailurePacket.model_validate_json(text)
        except ValidationError as err:
            first_line = text.lstrip().split("\n", 1)[0]
            if '"trajectory_id"' not in first_line:
                raise ValueError(
                    f"{path}: neither a FailurePacket JSON nor trajectories: {err}"
                ) from None
    packets = build_packet_from_jsonl(path, packet_config)
    if not packets:
        raise ValueError(f"{path}: no failed episode, so no packet to propose patches for")
    return packets[0]


# Why this size: the `engineer propose` job: packet, K, backend and sampling options
def propose_command(
    path: Path,
    k: int,
    backend: EngineerSpec | EngineerBackend | None = None,
    *,
    seed: int = 0,
    temperature: float = 1.0,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    packet_config: PacketConfig | None = None,
    prompt_config: PromptConfig | None = None,
    token_ids: bool = True,
) -> list[dict[str, Any]]:
    """`harness-r1 engineer propose PACKET -k K`: the proposals as JSON-able dicts, each with
    the packet id and the engineer's model id. A spec is built (and closed) here; a backend
    object is used as given."""
    packet = load_packet(path, packet_config)
    owned = backend is None or isinstance(backend, EngineerSpec)
    if backend is None or isinstance(backend, EngineerSpec):
        engineer = build_engineer(backend or EngineerSpec())
    else:
        engineer = backend
    try:
        proposals = propose_patches(
            packet,
            engineer,
            k,
            seed,
            temperature,
            max_new_tokens=max_new_tokens,
            config=prompt_config,
        )
    finally:
        if owned:
            close = getattr(engineer, "close", None)
            if callable(close):
                close()
    return [
        {
            "packet_id": packet.packet_id,
            "engineer": engineer.model_id,
            **p.to_dict(token_ids=token_ids),
        }
        for p in proposals
    ]


def proposals_json(proposals: Sequence[dict[str, Any]]) -> str:
    """What the CLI prints: a JSON array, one object per proposal."""
    return json.dumps(list(proposals), indent=2, ensure_ascii=False)
