"""K candidate patches for one failure packet: sample, parse, check statically, classify.

A proposal is `valid` when its text parses into a Patch for the packet's env
(`sandbox.parse.parse_engineer_output`) and the patch passes every static check
(`sandbox.static.check_patch`). Otherwise `stage` says where it failed ("parse", "scope": a
hook this engineer may not write, or "static") and `reason` carries the stable code: a
ParseCode (`no_patch_block`, `invalid_json`, ...), `hook_not_allowed`, or the first static
violation's Code (`banned_import`, ...). Valid proposals still have to run in
the isolated worker and the canary; that is not done here.

`propose_command` is what `harness-r1 engineer propose PACKET -k 4` runs: PACKET is a
FailurePacket JSON file, or a trajectories JSONL file whose first packet is built.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from harness_r1.consumers.packets import PacketConfig, build_packet_from_jsonl
from harness_r1.contracts import FailurePacket, HookName, Patch
from harness_r1.sandbox.intake import first_violation
from harness_r1.sandbox.parse import ParseResult, parse_engineer_output
from harness_r1.sandbox.static import StaticLimits, check_patch
from harness_r1.trainer.engineer import (
    DEFAULT_MAX_NEW_TOKENS,
    EngineerBackend,
    EngineerSample,
    EngineerSpec,
    build_engineer,
)
from harness_r1.trainer.prompt import PromptConfig, PromptExample, engineer_messages
from harness_r1.trainer.template_calls import CallResult, template_call

Stage = Literal["parse", "scope", "static"]
#: the reason of a template call that names templates wrongly (stage "parse")
BAD_TEMPLATE_CALL = "bad_template_call"


@dataclass(frozen=True)
class Proposal:
    """One sampled completion and what the sandbox's first two layers made of it."""

    index: int
    sample: EngineerSample
    patch: Patch | None
    valid: bool
    stage: Stage | None = None
    reason: str | None = None
    message: str = ""
    codes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

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
    """Parse and statically check one sample; `hooks`: the hooks this engineer may write (a
    patch writing another is refused at stage "scope"). A template call (`template_calls`) is
    rendered into its patch first; one that names templates wrongly is refused at stage "parse"
    as `bad_template_call`. Never raises (no layer does)."""
    call = _template_call(sample.text, env, limits)
    if call is not None and call.patch is None:
        return Proposal(index=index, sample=sample, patch=None, valid=False, stage="parse",
                        reason=BAD_TEMPLATE_CALL, message=call.error or "",
                        codes=(BAD_TEMPLATE_CALL,))  # fmt: skip
    parsed = (
        parse_engineer_output(sample.text, env=env)
        if call is None
        else ParseResult(patch=call.patch, notes=("template call",))
    )
    refused = partial(
        Proposal, index=index, sample=sample, patch=parsed.patch, valid=False, notes=parsed.notes
    )
    if parsed.patch is None:
        code = None if parsed.code is None else str(parsed.code)
        codes = () if code is None else (code,)
        return refused(stage="parse", reason=code, message=parsed.message, codes=codes)
    foreign = sorted({str(h.hook) for h in parsed.patch.hooks} - {str(h) for h in hooks})
    if foreign:
        allowed = ", ".join(str(h) for h in hooks)
        message = f"writes {', '.join(foreign)}; this engineer may write only {allowed}"
        return refused(
            stage="scope", reason="hook_not_allowed", message=message, codes=("hook_not_allowed",)
        )
    report = check_patch(parsed.patch, limits)
    first = first_violation(report)
    if first is not None:
        where = f"{first.hook} line {first.line}: " if first.hook and first.line else ""
        return refused(
            stage="static",
            reason=str(first.code),
            message=where + first.message,
            codes=tuple(report.codes()),
        )
    return Proposal(index=index, sample=sample, patch=parsed.patch, valid=True, notes=parsed.notes)


def _template_call(text: str, env: str, limits: StaticLimits | None) -> CallResult | None:
    """`template_call`, never raising (classify's contract): an unexpected error is a bad call."""
    try:
        return template_call(text, env, limits)
    except Exception as err:  # noqa: BLE001 - classify never raises
        return CallResult(error=f"template call: {type(err).__name__}")


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
