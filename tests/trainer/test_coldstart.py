"""The cold-start dataset on the real DBBench env and the real isolated sandbox, with a scripted
test double standing in for the frozen model: packets are built from its runs, the teacher's
proposals are canaried on the same tasks and seeds, and only executable, non-regressive patches
become SFT rows; every other proposal lands in a rejection bucket."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness_r1.cli.jobs.coldstart import ColdStartRequest, run_coldstart
from harness_r1.cli.jobs.target import TargetSpec
from harness_r1.contracts import (
    CandidateResult,
    FailurePacket,
    HookCode,
    HookName,
    Patch,
    TaskSpec,
    Trajectory,
)
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, HookSet, NoHooks, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.models.base import ChatMessage
from harness_r1.sandbox.canary import CanaryRunner
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.intake import static_validator
from harness_r1.sandbox.parse import render_completion
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.trainer.coldstart import (
    DATASET_FILE,
    PACKETS_FILE,
    REJECTED_FILE,
    STATS_FILE,
    build_coldstart,
)
from harness_r1.trainer.coldstart_rules import ColdStartConfig, judge
from harness_r1.trainer.coldstart_sources import (
    PacketSource,
    SourceConfig,
    TaskIndex,
    sources_from_runs,
    sources_from_trajectories,
)
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.prompt import engineer_messages
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration

ENV, SPLIT, MAX_STEPS = "dbbench", "dev", 4
JUNK = "The answer is 12"
FILES = (DATASET_FILE, REJECTED_FILE, PACKETS_FILE, STATS_FILE)


def scripted_target(known: Sequence[TaskSpec]) -> ScriptedPolicy:
    """A test double for the frozen model: for the query tasks it "knows" it answers the gold
    answer at once (so the baseline solves them), for every other task it answers junk."""
    gold = {t.payload["description"]: t.payload["label"] for t in known}

    def respond(messages: Sequence[ChatMessage]) -> str:
        asked = "\n".join(m["content"] for m in messages if m["role"] == "user")
        for description, label in gold.items():
            if description in asked:
                return "Action: Answer\nFinal Answer: " + json.dumps(label)
        return JUNK

    return ScriptedPolicy(respond)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = Settings().data_root()
    suite = get_suite(ENV)
    try:
        chosen = spread(suite.load_tasks(root, SPLIT), 8)
    except Exception as err:  # noqa: BLE001 - no data here: nothing to test against
        pytest.skip(f"dbbench data missing: {err}")
    # interleaved, so each batch of 4 holds one query task the scripted target solves
    tasks = chosen[0::2] + chosen[1::2]
    known = [t for t in tasks if t.task_type not in ("INSERT", "UPDATE", "DELETE")][:1] + [
        t for t in tasks[4:] if t.task_type not in ("INSERT", "UPDATE", "DELETE")
    ][:1]
    assert len(known) == 2
    runtime = HarnessRuntime(suite, scripted_target(known), root, RunConfig(max_steps=MAX_STEPS))
    try:
        trajectories = runtime.run(
            [
                EpisodeSpec(task=t, seed=100 + i, hooks=NoHooks(), trajectory_id=f"run-{i:02d}")
                for i, t in enumerate(tasks)
            ]
        )
    finally:
        runtime.close()
    assert sum(t.outcome.success for t in trajectories) == 2
    runs = tmp_path_factory.mktemp("runs") / "train.jsonl"
    runs.write_text("".join(t.model_dump_json() + "\n" for t in trajectories))
    sources = sources_from_trajectories(
        trajectories, TaskIndex(ENV, root), SourceConfig(batch_size=4)
    )
    return {
        "root": root,
        "tasks": tasks,
        "known": known,
        "trajectories": trajectories,
        "runs": runs,
        "sources": sources,
    }


def make_runner(world: dict[str, Any]) -> CanaryRunner:
    runtime = HarnessRuntime(
        get_suite(ENV), scripted_target(world["known"]), world["root"], RunConfig(max_steps=4)
    )
    sandbox = SandboxConfig(call_budget_s=0.5)

    def factory(patch: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(patch, sandbox, overlay_id=candidate_id)

    return CanaryRunner(runtime, factory, static_validator())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def build(world: dict[str, Any], teacher: Any, out: Path, **config: Any) -> Any:
    runner = make_runner(world)
    try:
        return build_coldstart(world["sources"], teacher, runner, ColdStartConfig(**config), out)
    finally:
        runner.runtime.close()


# -- sources --------------------------------------------------------------------------------


def test_sources_keep_the_real_tasks_and_seeds(world: dict[str, Any]) -> None:
    sources: list[PacketSource] = world["sources"]
    assert len(sources) == 2
    by_id = {t.trajectory_id: t for t in world["trajectories"]}
    for number, source in enumerate(sources):
        batch = [by_id[f"run-{i:02d}"] for i in range(4 * number, 4 * number + 4)]
        assert [(t.task_id, s) for t, s in zip(source.tasks, source.seeds, strict=True)] == [
            (t.task.task_id, t.task.seed) for t in batch
        ]
        assert source.packet.batch_size == 4 and source.packet.failures == 3
        # the packet masks ids, the source keeps them
        text = source.packet.to_json_bytes().decode()
        assert all(t.task_id not in text for t in source.tasks)
    # scope "packet": only the failed episodes the packet shows
    narrow = sources_from_trajectories(
        world["trajectories"], TaskIndex(ENV, world["root"]), SourceConfig(4, scope="packet")
    )
    assert [s.packet for s in narrow] == [s.packet for s in sources]
    failed = {t.task.task_id for t in world["trajectories"] if not t.outcome.success}
    for source in narrow:
        assert len(source.tasks) == len(source.packet.episodes) == 3
        assert {t.task_id for t in source.tasks} <= failed


def test_sources_from_runs_check_env_split_and_registry(
    world: dict[str, Any], tmp_path: Path
) -> None:
    runs = world["runs"]
    sources = sources_from_runs([runs], ENV, SPLIT, world["root"], SourceConfig(batch_size=4))
    assert [s.packet for s in sources] == [s.packet for s in world["sources"]]
    with pytest.raises(ValueError, match="dbbench/standard runs only"):
        sources_from_runs([runs], ENV, "standard", world["root"])
    trajectory: Trajectory = world["trajectories"][1]
    changed = trajectory.model_copy(
        update={"task": trajectory.task.model_copy(update={"instruction": "something else"})}
    )
    with pytest.raises(ValueError, match="differs from the one the trajectory ran"):
        sources_from_trajectories([changed], TaskIndex(ENV, world["root"]))


# -- the dataset ----------------------------------------------------------------------------


def test_template_teacher_dataset(world: dict[str, Any], tmp_path: Path) -> None:
    stats = build(world, TemplateWriter(), tmp_path / "a", k=4)
    dataset = read_jsonl(tmp_path / "a" / DATASET_FILE)
    rejected = read_jsonl(tmp_path / "a" / REJECTED_FILE)
    body = json.loads((tmp_path / "a" / STATS_FILE).read_text())

    assert stats.packets == body["packets"] == 2
    assert stats.proposals == body["proposals"] == 8
    assert stats.kept == len(dataset) == body["kept"]
    assert sum(stats.rejected.values()) == len(rejected) == body["rejected_total"]
    assert stats.kept + sum(stats.rejected.values()) == stats.proposals
    assert body["per_env"][ENV]["proposals"] == 8
    assert sum(p["proposals"] for p in body["per_packet"]) == 8
    assert Counter(r["reason"] for r in rejected) == Counter(stats.rejected)
    print("template teacher stats:", json.dumps({k: body[k] for k in ("kept", "rejected")}))

    packets = {s.packet.packet_id: s.packet for s in world["sources"]}
    for row in dataset:
        assert set(row) == {"prompt", "completion", "metadata"}
        meta = row["metadata"]
        assert row["prompt"] == engineer_messages(packets[meta["packet_id"]])
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        [completion] = row["completion"]
        assert completion["role"] == "assistant"
        assert completion["content"].startswith("<think>")
        assert completion["content"].endswith("</patch>")
        # kept: executable and non-regressive
        assert meta["status"] == "evaluated"
        assert meta["delta_success"] >= 0.0
        assert meta["patched_successes"] >= meta["base_successes"] == 1
        kinds = {e["kind"] for e in meta["events"]}
        assert not kinds & {"violation", "timeout", "crashed", "memory", "oversized", "raised"}
        assert meta["teacher"] == "template" and meta["templates"]
        assert meta["seeds"] and len(meta["seeds"]) == len(meta["task_ids"]) == 4
    for row in rejected:
        assert row["reasons"][0] == row["reason"] and row["text"]
    used = read_jsonl(tmp_path / "a" / PACKETS_FILE)
    assert [FailurePacket.model_validate(r["packet"]) for r in used] == list(packets.values())
    assert [r["seeds"] for r in used] == [list(s.seeds) for s in world["sources"]]

    # deterministic: a second build (fresh runner, fresh baseline) gives the same bytes
    build(world, TemplateWriter(), tmp_path / "b", k=4)
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(
        "json", data_files=str(tmp_path / "a" / DATASET_FILE), split="train"
    )
    assert loaded.column_names == ["prompt", "completion", "metadata"]


def _output(code: dict[HookName, str], description: str) -> str:
    hooks = [HookCode(hook=hook, code=text) for hook, text in code.items()]
    return render_completion(Patch(env=ENV, description=description, hooks=hooks), "Test double.")


class ScriptedTeacher:
    """A teacher test double: one proposal for each way a proposal can end."""

    name = "scripted-teacher"

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        return [EngineerSample(text=text) for text in self.propose(packet, k, seed)]

    def propose(self, packet: FailurePacket, k: int, seed: int) -> list[str]:
        return [
            "I would add a retry loop around the SQL.",  # no <patch> block
            _output(  # banned import
                {HookName.EPISODE_START: "def hook(ctx, state):\n    import os\n    return None"},
                "static rejection",
            ),
            _output(  # forces a wrong answer, also where the target answered right
                {
                    HookName.PRE_ACTION: (
                        "def hook(ctx, state):\n"
                        '    return {"effect": "force", "text": "answer: [\\"wrong\\"]"}'
                    )
                },
                "regressive",
            ),
            _output(  # far past the call budget
                {
                    HookName.EPISODE_START: (
                        "def hook(ctx, state):\n    n = 0\n    for a in range(5000):\n"
                        "        for b in range(5000):\n            for c in range(5000):\n"
                        "                n += 1\n    return None"
                    )
                },
                "timeout",
            ),
            _output(  # raises on every call
                {
                    HookName.EPISODE_START: (
                        "def hook(ctx, state):\n    zero = len(ctx) - len(ctx)\n"
                        '    return {"skills": [str(1 // zero)]}'
                    )
                },
                "raises",
            ),
            _output(  # harmless: kept
                {
                    HookName.POST_FEEDBACK: (
                        "def hook(ctx, state):\n"
                        '    return "Run SQL with sql: ..., answer with answer: [...]."'
                    )
                },
                "hint",
            ),
        ]


def test_rejection_buckets(world: dict[str, Any], tmp_path: Path) -> None:
    stats = build(world, ScriptedTeacher(), tmp_path, k=6, max_packets=1)
    assert stats.packets == 1 and stats.packets_available == 2
    assert stats.proposals == 6
    assert stats.rejected == {
        "hook_faults": 1,
        "regressive": 1,
        "static:banned_import": 1,
        "unparseable": 1,
        # it timed out on every call: the canary's per-overlay budget disabled it (invalid)
        "invalid": 1,
    }
    assert stats.kept == 1
    rejected = {r["metadata"]["proposal_index"]: r for r in read_jsonl(tmp_path / REJECTED_FILE)}
    assert rejected[2]["metadata"]["delta_success"] < 0
    assert rejected[2]["metadata"]["patched_successes"] == 0
    assert rejected[3]["reason"] == "invalid" and "hook_budget" in rejected[3]["detail"]
    assert rejected[4]["reason"] == "hook_faults" and "raised" in rejected[4]["detail"]
    assert rejected[0]["metadata"]["status"] is None  # never reached the canary
    [kept] = read_jsonl(tmp_path / DATASET_FILE)
    assert kept["metadata"]["proposal_index"] == 5
    assert kept["metadata"]["delta_success"] == 0.0
    assert kept["metadata"]["applied_effects"]["hint"] > 0


def _result(events: dict[str, int], delta: float = 0.0) -> CandidateResult:
    return CandidateResult(
        candidate_id="c",
        patch_sha256=None,
        status="evaluated",
        delta_success=delta,
        delta_mean_reward=delta,
        sandbox_events=events,
    )


def test_judge_rules() -> None:
    config = ColdStartConfig()
    # runtime behaviour and worker housekeeping are not violations
    assert judge(_result({"veto_limit": 3, "restarts": 1, "recycles": 1}), config) == []
    assert judge(_result({"violations.os_error": 1}), config) == ["violation"]
    assert judge(_result({"memory": 1, "junk": 2}, -0.25), config) == [
        "violation",
        "hook_faults",
        "regressive",
    ]
    lenient = ColdStartConfig(require_no_violations=False, require_no_hook_faults=False)
    assert judge(_result({"timeout": 1, "raised": 1}), lenient) == []
    assert judge(_result({}, 0.0), ColdStartConfig(min_delta=0.01)) == ["regressive"]
    assert judge(_result({}, 0.0), ColdStartConfig(min_reward_delta=0.1)) == ["regressive"]
    inert = ColdStartConfig(require_effect=True)
    assert judge(_result({}), inert) == ["no_effect"]
    acting = _result({}).model_copy(update={"applied_effects": {"hint": 2}})
    assert judge(acting, inert) == []
    infra = CandidateResult(candidate_id="c", patch_sha256=None, status="infra_error")
    assert judge(infra, config) == ["infra_error"]


def test_the_coldstart_job_writes_the_dataset(world: dict[str, Any], tmp_path: Path) -> None:
    request = ColdStartRequest(
        [world["runs"]],
        ENV,
        SPLIT,
        tmp_path,
        k=2,
        limit_packets=1,
        batch_size=4,
        target=TargetSpec(max_steps=MAX_STEPS),
    )
    # the test double, not the embedded model
    stats = run_coldstart(request, world["root"], target=scripted_target(world["known"]))
    assert stats.packets == 1 and stats.packets_available == 2 and stats.proposals == 2
    assert stats.kept + sum(stats.rejected.values()) == 2
    assert all((tmp_path / name).is_file() for name in FILES)
    assert not list(tmp_path.glob(".*.partial"))


# -- against an incumbent overlay (issue 20: the engineer improves the deployed harness) ------

HINT_LINK = Patch(
    env=ENV,
    description="A hint after every answer.",
    hooks=[
        HookCode(
            hook=HookName.POST_FEEDBACK,
            code="def hook(ctx, state):\n    return 'Check the table name.'\n",
        )
    ],
)


def test_sources_over_an_incumbent_show_its_hooks_and_judge_against_it(
    world: dict[str, Any], tmp_path: Path
) -> None:
    from harness_r1.sandbox.canary import Incumbent
    from harness_r1.sandbox.compose import Link

    incumbent = Incumbent.of_chain("ov-hint", [Link("ov-hint", HINT_LINK)])
    config = SourceConfig(batch_size=4, incumbent=incumbent)
    with pytest.raises(ValueError, match="not the incumbent 'ov-hint'"):
        sources_from_trajectories(world["trajectories"], TaskIndex(ENV, world["root"]), config)
    under = [t.model_copy(update={"harness_version": "ov-hint"}) for t in world["trajectories"]]
    sources = sources_from_trajectories(under, TaskIndex(ENV, world["root"]), config)
    assert len(sources) == 2 and all(s.incumbent is incumbent for s in sources)
    shown = sources[0].packet.incumbent
    assert [(h.hook, h.links) for h in shown] == [(HookName.POST_FEEDBACK, 1)]
    assert "Check the table name." in shown[0].code
    runner = make_runner(world)
    seen: list[str] = []
    evaluate = runner.evaluate

    def recording(batch: Any, candidates: Any, incumbent: Any = None) -> Any:
        seen.append(incumbent.overlay_id)
        return evaluate(batch, candidates, incumbent)

    runner.evaluate = recording  # type: ignore[method-assign]
    try:
        build_coldstart(sources, TemplateWriter(), runner, ColdStartConfig(k=2), tmp_path / "o")
    finally:
        runner.runtime.close()
    assert seen == ["ov-hint", "ov-hint"]  # every packet's candidates judged against it
    # GRPO re-runs the canary from packets.jsonl: against the same incumbent
    from harness_r1.trainer.online import OnIncumbent, load_packet_rows, packets_and_resolver

    rows = load_packet_rows(tmp_path / "o" / PACKETS_FILE)
    assert [row["incumbent"]["overlay_id"] for row in rows] == ["ov-hint", "ov-hint"]
    packets, resolver = packets_and_resolver(rows, world["root"], lambda env: runner)
    _, judged = resolver.resolve(packets[0].packet_id)
    assert isinstance(judged, OnIncumbent) and judged.incumbent.patch == incumbent.patch
    base_rows = [{**row, "incumbent": None} for row in rows]
    _, plain = packets_and_resolver(base_rows, world["root"], lambda env: runner)[1].resolve(
        packets[0].packet_id
    )
    assert plain is runner
