"""`harness-r1 engineer evaluate`: score one engineer version on held-out packets (valid
fraction, mean canary delta, tokens/s) and write the report; see harness_r1/trainer/heldout.py.

Packets are built from runs of the held-out split exactly as the cold start builds them from
the training split, so before-SFT / after-SFT / after-GRPO numbers are comparable: run this once
per version with the same runs, seed and `--baseline-cache`. `--validity-only` loads no target
and runs no episode (the valid fraction of an SFT checkpoint, cheaply).

An evaluation with `--out` keeps its report so far in `OUT.partial.json` after every packet; a
rerun of the same request (same engineer weights, runs, incumbent, config: its `resume_key`)
resumes after the packets it finished, and a progress file of another request is ignored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from harness_r1.cli.jobs.canary import load_incumbent
from harness_r1.cli.jobs.target import TargetSpec
from harness_r1.consumers import read_trajectories
from harness_r1.envs import get_suite
from harness_r1.models import choose_dtype
from harness_r1.sandbox import (
    BaselineCache,
    CanaryBatch,
    CanaryRunner,
    GateConfig,
    build_canary_runner,
)
from harness_r1.trainer import (
    EngineerBackend,
    EngineerSpec,
    HeldOutConfig,
    HeldOutGate,
    HeldOutReport,
    NoCanary,
    PacketScore,
    PacketSource,
    PatchWriter,
    SourceConfig,
    TaskIndex,
    TeacherConfig,
    TemplateWriter,
    build_engineer,
    evaluate_engineer,
    file_sha256,
    sources_from_runs,
    tasks_and_seeds,
)


@dataclass(frozen=True)
class EngineerEvalRequest:
    runs: list[Path]
    env: str
    split: str
    engineer: EngineerSpec
    heldout: HeldOutConfig
    out: Path | None = None
    limit_packets: int | None = None
    batch_size: int = 8
    target: TargetSpec = field(default_factory=lambda: TargetSpec(max_new_tokens=64))
    baseline_cache: Path | None = None
    on: list[Path] = field(default_factory=list)  # the incumbent's chain; empty: base harness
    gate: GateConfig | None = None  # with a gate: verdicts and the promoted fraction
    teacher_templates: int | None = None  # set: the template teacher writes, not the model


def run_engineer_eval(
    request: EngineerEvalRequest, data_root: Path, console: Console
) -> HeldOutReport:
    sources = sources_from_runs(
        request.runs,
        request.env,
        request.split,
        data_root,
        SourceConfig(
            batch_size=request.batch_size, incumbent=load_incumbent(request.on, request.env)
        ),
    )[: request.limit_packets]
    if not sources:
        raise SystemExit("no failed episodes in the runs: no held-out packet to propose for")
    gate = None if request.gate is None else _gate(request, data_root, request.gate)
    runner = _runner(request, data_root) if request.heldout.canary else None
    engineer: EngineerBackend | PatchWriter = (
        build_engineer(request.engineer)
        if request.teacher_templates is None
        else TemplateWriter(TeacherConfig(max_templates=request.teacher_templates))
    )
    name = engineer.name if isinstance(engineer, PatchWriter) else engineer.model_id
    partial = None if request.out is None else request.out.with_suffix(".partial.json")
    key = "" if partial is None else resume_key(request)
    scored = _finished(partial, key, sources, console)
    done = tuple(scored)
    dtype = target_dtype(request)

    def progress(score: PacketScore) -> None:
        scored.append(score)  # the report so far is on disk (.partial) after every packet
        report = HeldOutReport(name, request.heldout, scored, gate is not None)
        _write(partial, report, key, dtype)
        console.print(
            f"packet {score.packet_id[:12]}: {score.valid}/{score.proposals} valid, "
            f"deltas {score.deltas}, {score.generated_tokens} tokens in "
            f"{score.generate_seconds:.0f} s, canary {score.canary_seconds:.0f} s"
        )

    console.print(f"{len(sources)} held-out packets, engineer {name}")
    try:
        report = evaluate_engineer(
            sources,
            engineer,
            lambda _env: runner or NoCanary(),
            request.heldout,
            progress,
            gate,
            done,
        )
    finally:
        if runner is not None:
            runner.runtime.close()
        close = getattr(engineer, "close", None)
        if callable(close):
            close()
    _write(request.out, report, key, dtype)
    if partial is not None:  # the whole report is written: the progress copy has served
        partial.unlink(missing_ok=True)
    return report


#: the progress file's format: bump it when what a packet's score holds, or how it is
#: computed, changes, so that no progress of the old code is resumed by the new (2: the guard
#: runs once per patch over the held-out pool, `HeldOutGate.guard_pairs`)
PROGRESS_FORMAT = 2


def target_dtype(request: EngineerEvalRequest) -> str:
    """The number format the embedded target computes in on this host ("auto" resolved): a
    report says it, as canary deltas of one format are not another's."""
    return choose_dtype(request.target.dtype).dtype


def resume_key(request: EngineerEvalRequest) -> str:
    """SHA-256 of what an evaluation's numbers depend on: the request (engineer, sampling,
    gate, target, sizes; not the API key, timeouts, threads or caches), the target's number
    format on this host, PROGRESS_FORMAT, and the bytes it reads (the runs, the incumbent
    chain, every file of a local adapter, engineer checkpoint or target checkpoint). A
    progress file resumes only a request with the same key. A remote engineer or target (an
    OpenAI-compatible server) is known by its URL and model name only: a server that now
    serves other weights under that name is not noticed."""
    engineer = replace(request.engineer, api_key=None, timeout_s=0.0, threads=None, cache_dir=None)
    identity = replace(
        request, out=None, engineer=engineer, target=replace(request.target, cache_dir=None)
    )
    digest = hashlib.sha256(f"{PROGRESS_FORMAT}|{target_dtype(request)}|{identity!r}".encode())
    for path in [*request.runs, *request.on, *_local_model_files(request)]:
        digest.update(str(path).encode())
        digest.update(file_sha256(path).encode() if path.is_file() else b"<absent>")
    return digest.hexdigest()


def _local_model_files(request: EngineerEvalRequest) -> list[Path]:
    """Every file of the adapter, engineer and target that is a local path, sorted."""
    named = [
        request.engineer.adapter,
        request.engineer.kind,
        request.engineer.model,
        request.target.kind,
        request.target.model,
    ]
    files: list[Path] = []
    for name in named:
        path = None if name is None else Path(name)
        if path is not None and path.is_dir():
            files += sorted(f for f in path.rglob("*") if f.is_file())
        elif path is not None and path.is_file():
            files.append(path)
    return files


def _finished(
    partial: Path | None, key: str, sources: list[PacketSource], console: Console
) -> list[PacketScore]:
    """The finished packets of an interrupted evaluation of this same request (none when
    there is no progress file, or it belongs to another request or other packets, or cannot
    be read: the evaluation then starts over and says why)."""
    if partial is None or not partial.exists():
        return []
    try:
        data = json.loads(partial.read_text(encoding="utf-8"))
        if data.get("resume_key") != key:
            console.print(f"ignoring {partial}: the progress of another request")
            return []
        scores = [PacketScore.from_dict(packet) for packet in data["packets"]]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        console.print(f"ignoring {partial}: unreadable ({type(err).__name__}: {err})")
        return []
    ids = [source.packet.packet_id for source in sources]
    if [score.packet_id for score in scores] != ids[: len(scores)]:
        console.print(f"ignoring {partial}: its packets are not these runs' first packets")
        return []
    console.print(f"resuming after {len(scores)} of {len(sources)} packets ({partial})")
    return scores


def _gate(request: EngineerEvalRequest, data_root: Path, config: GateConfig) -> HeldOutGate:
    """Every (task, seed) of the held-out runs: each packet's guard batch is the rest of it."""
    runs = [t for path in request.runs for t in read_trajectories(path)]
    tasks, seeds = tasks_and_seeds(runs, TaskIndex(request.env, data_root))
    return HeldOutGate(CanaryBatch(request.env, tasks, seeds), config)


def _runner(request: EngineerEvalRequest, data_root: Path) -> CanaryRunner:
    return build_canary_runner(
        get_suite(request.env),
        request.target.build_policy(),
        data_root,
        request.target.run_config("engineer-eval"),
        cache=BaselineCache(request.baseline_cache),
    )


def _write(path: Path | None, report: HeldOutReport, key: str, dtype: str) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    data = {**report.to_dict(), "target_dtype": dtype, "resume_key": key}
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
