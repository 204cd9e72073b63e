"""`harness-r1 train coldstart`: packets from training-split runs, K teacher proposals each,
canaried on the frozen target with the patches in the isolated worker; what survives is the SFT
dataset (see `harness_r1.trainer.coldstart.build_coldstart`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness_r1.cli.jobs.canary import load_incumbent
from harness_r1.cli.jobs.target import TargetSpec
from harness_r1.consumers import PacketConfig
from harness_r1.envs import get_suite
from harness_r1.models import Policy
from harness_r1.sandbox import BaselineCache, SandboxConfig, build_canary_runner
from harness_r1.trainer import (
    CanaryScope,
    ColdStartConfig,
    ColdStartStats,
    PacketStats,
    PatchWriter,
    PromptConfig,
    SourceConfig,
    TemplateWriter,
    build_coldstart,
    sources_from_runs,
)


@dataclass(frozen=True)
class ColdStartRequest:
    """`runs`: trajectories JSONL files of `env`/`split`; `limit_packets` caps the packets
    used; `batch_size` is the trajectories per packet; `baseline_cache` keeps baselines on disk
    across runs; the dataset is written into `out_dir`."""

    runs: list[Path]
    env: str
    split: str
    out_dir: Path
    k: int = 4
    limit_packets: int | None = None
    seed: int = 0
    min_delta: float = 0.0
    require_effect: bool = False
    batch_size: int = 8
    scope: CanaryScope = "batch"
    packet_config: PacketConfig = field(default_factory=PacketConfig)
    target: TargetSpec = field(default_factory=TargetSpec)
    baseline_cache: Path | None = None
    lean_prompt: bool = False  # the rows' prompts in the lean mode (trainer.prompt)
    on: list[Path] = field(default_factory=list)  # the incumbent's chain; empty: base harness


def run_coldstart(
    request: ColdStartRequest,
    data_root: Path,
    *,
    target: Policy | None = None,
    teacher: PatchWriter | None = None,
    sandbox: SandboxConfig | None = None,
    on_packet: Callable[[PacketStats], None] | None = None,
) -> ColdStartStats:
    """The teacher defaults to the template teacher; the target to `request.target` built
    here (the embedded SmolLM2, greedy), or the Policy given (used as is, closed by its
    owner)."""
    source_config = SourceConfig(
        batch_size=request.batch_size,
        scope=request.scope,
        packet=request.packet_config,
        incumbent=load_incumbent(request.on, request.env),
    )
    sources = sources_from_runs(
        list(request.runs), request.env, request.split, data_root, source_config
    )
    policy = target if target is not None else request.target.build_policy()
    config = ColdStartConfig(
        k=request.k,
        seed=request.seed,
        min_delta=request.min_delta,
        require_effect=request.require_effect,
        max_packets=request.limit_packets,
        prompt=PromptConfig(lean=request.lean_prompt),
    )
    runner = build_canary_runner(
        get_suite(request.env),
        policy,
        data_root,
        request.target.run_config("coldstart"),
        sandbox=sandbox,
        limits=config.prompt.limits,
        cache=BaselineCache(request.baseline_cache),
    )
    try:
        return build_coldstart(
            sources,
            teacher or TemplateWriter(),
            runner,
            config,
            request.out_dir,
            on_packet=on_packet,
        )
    finally:
        runner.runtime.close()
        close = getattr(policy, "close", None)
        if target is None and callable(close):
            close()
