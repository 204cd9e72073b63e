"""The engineer-value benchmark's bookkeeping (benchmarks/engineer_value/): the committed
artefacts agree with each other and with the code that reads them, so a rerun reuses them
instead of silently retraining (an SFT run is ~26 min, a GRPO chunk ~30 min on 2 cores), and
a partial run merges into the committed table rather than dropping rows."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness_r1.trainer.prompt import system_prompt
from harness_r1.trainer.prompt_config import PromptConfig

#: the experiment's package, which `python benchmarks/engineer_value` runs
PACKAGE = Path(__file__).parents[2] / "benchmarks" / "engineer_value"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """The package with every module of it imported (`bench.sft.sft_version`, ...): benchmarks/
    is no package, so it is loaded from its folder under the name its `__main__` gives it."""
    spec = importlib.util.spec_from_file_location(
        "engineer_value", PACKAGE / "__init__.py", submodule_search_locations=[str(PACKAGE)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["engineer_value"] = module
    spec.loader.exec_module(module)
    for info in pkgutil.iter_modules([str(PACKAGE)]):
        if info.name != "__main__":  # it runs the command line
            importlib.import_module(f"engineer_value.{info.name}")
    return module


def record_commands(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands the stages would start, none started: `run` replaced in every module that
    calls it (each imports it by name)."""
    commands: list[list[str]] = []
    for name, module in list(sys.modules.items()):
        if name.startswith("engineer_value.") and hasattr(module, "run"):
            monkeypatch.setattr(module, "run", lambda command, log, **_: commands.append(command))
    return commands


def test_the_committed_sft_engineer_is_the_one_the_committed_rows_teach(
    bench: ModuleType,
) -> None:
    """A change to the output format (`current_format`, template calls) that renders the
    committed rows differently, or to the lean system prompt they are taught under (as the
    template menu did), makes `sft_version` ignore the committed engineer: retrain and commit
    it (`--stages sft`)."""
    digest = (bench.settings.COMMITTED_SFT / "rows-digest.txt").read_text().strip()
    assert digest == bench.sft.committed_rows_digest()


def test_committed_grpo_artefacts_continue_the_committed_sft_engineer(bench: ModuleType) -> None:
    """A GRPO checkpoint or engineer in the repository belongs to the committed SFT engineer
    (a new SFT engineer drops the old ones: GRPO starts again from it). When neither is there
    (GRPO has not run from this engineer yet), there is nothing to check."""
    lineages = [
        folder / "lineage.json"
        for folder in (bench.settings.CARRIED_GRPO, bench.settings.COMMITTED_GRPO)
        if (folder / "lineage.json").exists()
    ]
    if not lineages:
        return
    sft = bench.common.weights_sha(bench.settings.COMMITTED_SFT)
    for path in lineages:
        meta = json.loads(path.read_text())
        assert meta["sft_weights"] == sft, path
        assert meta["grpo_args"] == bench.settings.GRPO_ARGS, path
        assert set(meta["envs"]) <= set(bench.settings.DEFAULT_ENVS), path


def test_grpo_reads_only_train_packets_of_its_envs(bench: ModuleType, tmp_path: Path) -> None:
    """GRPO's packets are the cold start's of its envs, asserted train-only: without a cold
    start the script says which stage comes first; a held-out task in a packet stops it."""
    with pytest.raises(AssertionError, match="--stages coldstart first"):
        bench.grpo.grpo_packets(["webshop"], tmp_path)
    heldout = sorted(bench.common.heldout_task_ids("webshop"))[0]
    folder = tmp_path / "webshop-engineer-coldstart"
    folder.mkdir()
    row = {"env": "webshop", "task_ids": [heldout], "splits": ["fixed_train"]}
    (folder / "packets.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(AssertionError, match="held-out tasks"):
        bench.grpo.grpo_packets(["webshop"], tmp_path)


#: the lean system prompt the table's model engineers read on WebShop, as its rows record it
WEBSHOP_PROMPT = hashlib.sha256(
    system_prompt("webshop", config=PromptConfig(lean=True)).encode()
).hexdigest()


def row(
    engineer: str, incumbent: str = "inc-a", delta: float = 0.0, prompt: str = WEBSHOP_PROMPT
) -> dict[str, object]:
    return {
        "engineer": engineer,
        "incumbent_sha256": incumbent,
        "mean_delta": delta,
        "prompt_sha256": None if engineer == "teacher" else prompt,
    }


def test_a_partial_run_merges_into_the_committed_table(bench: ModuleType) -> None:
    earlier = {
        "webshop": [row("untrained"), row("teacher"), row("sft", delta=0.1)],
        "dbbench": [row("teacher")],
    }
    merged = bench.engineers.merged_engineer_rows(
        earlier, {"webshop": [row("grpo", delta=0.3), row("sft", delta=0.2)], "dbbench": []}
    )
    assert [r["engineer"] for r in merged["webshop"]] == ["untrained", "teacher", "sft", "grpo"]
    assert next(r for r in merged["webshop"] if r["engineer"] == "sft")["mean_delta"] == 0.2
    assert merged["dbbench"] == earlier["dbbench"]  # nothing rerun there: the committed rows stand


def test_rows_against_another_incumbent_are_dropped_by_a_rerun(bench: ModuleType) -> None:
    earlier = {"webshop": [row("untrained", "old"), row("teacher", "old")]}
    merged = bench.engineers.merged_engineer_rows(earlier, {"webshop": [row("sft", "new")]})
    assert merged["webshop"] == [row("sft", "new")]


def test_model_rows_under_another_prompt_are_dropped_by_a_rerun(bench: ModuleType) -> None:
    """A change of prompt (the template menu): the untrained engineer has no weights to tell its
    rows apart, so its row from before the menu must not stand beside rows measured under it. The
    template teacher reads no prompt: its row stands."""
    earlier = {"webshop": [row("untrained", prompt="old"), row("teacher"), row("sft")]}
    legacy = {k: v for k, v in row("untrained").items() if k != "prompt_sha256"}
    merged = bench.engineers.merged_engineer_rows(earlier, {"webshop": [row("grpo")]})
    assert merged["webshop"] == [row("teacher"), row("sft"), row("grpo")]
    merged = bench.engineers.merged_engineer_rows(earlier, {"webshop": [row("teacher", delta=0.5)]})
    assert merged["webshop"] == [row("teacher", delta=0.5), row("sft")]  # a teacher-only rerun
    merged = bench.engineers.merged_engineer_rows({"webshop": [legacy]}, {"webshop": [row("sft")]})
    assert merged["webshop"] == [row("sft")]  # a row from before prompts were recorded goes
    assert bench.engineers.engineer_prompt_sha("webshop", []) == WEBSHOP_PROMPT


def test_the_prompt_key_follows_the_hooks_an_engineer_may_write(bench: ModuleType) -> None:
    full = bench.engineers.engineer_prompt_sha("webshop", [])
    assert full == bench.engineers.engineer_prompt_sha("webshop", ["--adapter", "x"])
    assert full != bench.engineers.engineer_prompt_sha("webshop", ["--without-hook", "pre_action"])
    assert full != bench.engineers.engineer_prompt_sha("alfworld", [])
    assert bench.engineers.engineer_prompt_sha("webshop", ["--teacher", "1"]) is None


def test_the_bootstrap_interval_is_seeded_and_brackets_the_mean(bench: ModuleType) -> None:
    values = [0.0, 0.25, 0.5, 0.0, 1.0, 0.25, 0.0, 0.75]
    low, high = bench.engineers.mean_interval(values)
    assert low <= sum(values) / len(values) <= high
    assert bench.engineers.mean_interval(values) == [low, high]
    assert bench.engineers.mean_interval([]) is None
    assert bench.engineers.mean_interval([0.5] * 5) == [0.5, 0.5]


def test_another_target_is_another_grpo_run(bench: ModuleType) -> None:
    """`--target-policy` reaches `train grpo online` and its lineage, so a committed GRPO
    engineer or checkpoint trained against SmolLM2 is not taken for one against the target."""
    smollm2 = bench.settings.grpo_args()
    try:
        bench.settings.use_target_policy("gemma3")
        assert bench.settings.grpo_args() == [*smollm2, "--policy", "gemma3"]
        assert bench.settings.TARGET_POLICY == ["--policy", "gemma3"]
    finally:
        bench.settings.use_target_policy(None)
    assert bench.settings.grpo_args() == smollm2


def test_another_targets_run_keeps_its_results_apart_from_smollm2s(
    bench: ModuleType, tmp_path: Path
) -> None:
    """The committed cold start, engineers and table are SmolLM2's: a run against the tuned
    target neither overwrites nor merges into them, nor restores SmolLM2's canaried rows; its
    results go to a folder of their own, named by the target."""
    assert bench.settings.published(tmp_path) == (tmp_path, bench.settings.COMMITTED)
    assert bench.common.committed_results("results-engineers.json")
    try:
        bench.settings.use_target_policy(str(tmp_path / "target-abc" / "tuned-v0001"))
        home = bench.settings.COMMITTED / "against-target-abc-tuned-v0001"
        assert bench.settings.published(tmp_path) == (tmp_path, home)
        assert not home.exists()  # only a writer makes it
        assert bench.common.committed_results("results-engineers.json") == {}
        assert (
            bench.coldstart.restore_coldstart("webshop", tmp_path, tmp_path / "runs.jsonl") is False
        )
        assert bench.coldstart.export_coldstart("webshop", tmp_path, "digest") == 0
        # the same cold start (the committed SFT engineer), but no GRPO trained on SmolLM2
        assert bench.sft.sft_version(tmp_path) == bench.settings.COMMITTED_SFT
        assert bench.grpo.carried_grpo(bench.settings.COMMITTED_SFT, ["webshop"]) is None
        assert bench.grpo.grpo_engineer(tmp_path) is None
        assert bench.rft.stage_rft(["webshop"], tmp_path, tmp_path / "log") is None  # no rows
    finally:
        bench.settings.use_target_policy(None)


def test_a_regenerated_checkpoint_is_another_target(bench: ModuleType, tmp_path: Path) -> None:
    """Two tuned targets can share a path (the coevolution stage names a checkpoint by the
    harnesses it learned under): their results folders differ by content, a copy shares one."""
    checkpoint = tmp_path / "coevolution" / "target-abc" / "tuned-v0001"
    checkpoint.mkdir(parents=True)
    try:
        (checkpoint / "model.safetensors").write_bytes(b"one")
        bench.settings.use_target_policy(str(checkpoint))  # named here, once: the run's target
        first = bench.settings.results_home().name
        (checkpoint / "model.safetensors").write_bytes(b"two")
        bench.settings.use_target_policy(str(checkpoint))
        second = bench.settings.results_home().name
        assert first.startswith("against-target-abc-tuned-v0001-") and first != second
        (checkpoint / "model.safetensors").write_bytes(b"one")
        bench.settings.use_target_policy(str(checkpoint))
        assert bench.settings.results_home().name == first
        bench.settings.use_target_policy("/odd path/gemma 3")
        assert bench.settings.results_home().name == "against-odd-path-gemma-3"
    finally:
        bench.settings.use_target_policy(None)


def test_the_target_policy_reaches_every_target_run(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = record_commands(bench, monkeypatch)
    bench.settings.use_target_policy("smollm2")
    assert bench.settings.TARGET_POLICY == []  # the embedded default is no other target
    try:
        bench.settings.use_target_policy("gemma3")
        bench.common.target_runs("webshop", "fixed_train", 4, 0, [], tmp_path / "a.jsonl", tmp_path)
        bench.common.heldout_target_runs(
            "webshop", ["--policy", "other"], tmp_path / "b.jsonl", tmp_path
        )
    finally:
        bench.settings.use_target_policy(None)
    assert commands[0][-4:-2] == ["--policy", "gemma3"]
    assert commands[1][-6:-2] == ["--policy", "gemma3", "--policy", "other"]  # the last wins


def test_a_stopped_target_run_runs_again(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eval` writes each episode as it ends: a run stopped mid-way leaves a short (or empty)
    file, which is no result (an empty held-out file is not a finished run)."""
    commands = record_commands(bench, monkeypatch)
    path = tmp_path / "dbbench-heldout.jsonl"
    path.write_text("")
    bench.common.target_runs("dbbench", "dev", 2, 0, [], path, tmp_path / "log")
    assert len(commands) == 1 and commands[0][-1] == str(path)
    path.write_text('{"trajectory_id": "a"}\n')
    bench.common.target_runs("dbbench", "dev", 2, 0, [], path, tmp_path / "log")
    assert len(commands) == 2  # one of two: still short
    path.write_text('{"trajectory_id": "a"}\n{"trajectory_id": "b"}\n')
    bench.common.target_runs("dbbench", "dev", 2, 0, [], path, tmp_path / "log")
    assert len(commands) == 2  # complete: kept


def test_the_tuned_target_learns_under_the_harness_the_engineers_round_deployed(
    bench: ModuleType, tmp_path: Path
) -> None:
    """Coevolution tunes the target under the incumbent plus the final engineer's best
    promoted patch once the engineers stage has promoted one (the pool's harness after that
    round), and under the incumbent before."""
    coevolution, engineers = bench.coevolution, bench.engineers
    incumbent = bench.common.incumbent_on("webshop", tmp_path)
    with pytest.raises(SystemExit, match="--stages engineers --envs webshop --engineers grpo"):
        coevolution.deployed_on("webshop", tmp_path)  # no row here: not "nothing promoted"
    name = engineers.final_engineer(tmp_path)
    assert name == "grpo"
    files = engineers.engineer_files(
        "webshop", name, tmp_path, engineers.engineer_args(name, tmp_path)
    )
    files["report"].parent.mkdir(parents=True)
    files["report"].write_text("{}")
    assert coevolution.deployed_on("webshop", tmp_path) == incumbent
    assert coevolution.harness_label("webshop", tmp_path) == "incumbent"
    files["best"].write_text("{}")
    assert coevolution.deployed_on("webshop", tmp_path) == [*incumbent, "--on", str(files["best"])]
    assert coevolution.harness_label("webshop", tmp_path) == "incumbent+grpo's best"


def test_samples_are_counted_by_the_template_they_name(bench: ModuleType) -> None:
    def sample(text: str, valid: bool) -> dict[str, Any]:
        return {"text": text, "valid": valid}

    call = "<patch>\n# description: templates: {0}. {0}(x=1).\n</patch>"
    report = {
        "packets": [
            {"samples": [sample(call.format("alfworld_skills"), True)] * 2},
            {
                "samples": [
                    sample(call.format("alfworld_take_place"), True),
                    sample(call.format("take_place"), False),
                    sample("<patch>\n# === hook: pre_action ===\ndef h(c, s): ...</patch>", False),
                    sample("no answer", False),
                ]
            },
        ]
    }
    assert bench.reach.template_counts(report) == {
        "valid_by_template": {"alfworld_skills": 2, "alfworld_take_place": 1},
        "invalid_by_template": {"code": 1, "no patch": 1, "take_place": 1},
    }


def table_has_rft_rows(bench: ModuleType) -> bool:
    """Whether the committed table reports an RFT engineer: then its adapter and lineage must
    be committed (a test that returned early on a missing lineage could never fail)."""
    table = json.loads((bench.settings.COMMITTED / "results-engineers.json").read_text())
    return any(row["engineer"] == "rft" for rows in table.values() for row in rows)


def test_rft_keeps_the_improving_rows_each_env_weighted_like_the_largest(
    bench: ModuleType,
) -> None:
    """RFT is taught only rows whose canary beat the incumbent; an env with few such rows is
    repeated so the env with many does not drown it, and an env with none adds nothing."""

    def row(name: str, delta: float) -> dict[str, Any]:
        return {"name": name, "metadata": {"delta_success": delta}}

    rows = {
        "webshop": [row(f"w{i}", 0.25) for i in range(6)] + [row("w-flat", 0.0)],
        "alfworld": [row("a-flat", 0.0), row("a1", 0.5), row("a-worse", -0.25), row("a2", 0.75)],
        "dbbench": [row("d-flat", 0.0)],
    }
    selected = [(env, r["name"]) for env, r in bench.rft.rft_selection(rows)]
    assert selected == [
        *[("webshop", f"w{i}") for i in range(6)],
        *[("alfworld", name) for name in ("a1", "a2") * 3],
    ]
    assert bench.rft.rft_selection({"dbbench": rows["dbbench"]}) == []


def test_the_committed_rft_engineer_continues_the_committed_grpo_engineer(
    bench: ModuleType,
) -> None:
    """An RFT engineer in the repository continued the committed SFT+GRPO engineer on the
    committed rows' improving ones (`rft_engineer` would ignore it otherwise: retrain it with
    `--stages rft`). Once the committed table has rft rows the engineer must be there; before
    RFT has run there is nothing to check."""
    lineage = bench.settings.COMMITTED_RFT / "lineage.json"
    if not table_has_rft_rows(bench):
        return
    meta = json.loads(lineage.read_text())
    assert meta["parent_weights"] == bench.common.weights_sha(bench.settings.COMMITTED_GRPO)
    assert meta["epochs"] == bench.rft.RFT_EPOCHS
    assert meta["rows_digest"] == bench.rft.committed_rft_digest(tuple(meta["envs"]))


def test_the_committed_rft_engineer_serves_the_rft_stage_only_for_its_rows(
    bench: ModuleType, tmp_path: Path
) -> None:
    """The table takes the committed RFT engineer whatever envs it was taught. The rft stage
    takes it for envs whose improving rows are the ones it was taught (DBBench has none, so
    adding it changes nothing), and trains its own for other rows."""
    lineage = bench.settings.COMMITTED_RFT / "lineage.json"
    if not table_has_rft_rows(bench):
        return
    envs = json.loads(lineage.read_text())["envs"]
    assert bench.rft.rft_engineer(tmp_path) == bench.settings.COMMITTED_RFT
    assert bench.rft.rft_engineer(tmp_path, list(reversed(envs))) == bench.settings.COMMITTED_RFT
    assert (
        bench.rft.rft_engineer(tmp_path, list(bench.settings.DEFAULT_ENVS))
        == bench.settings.COMMITTED_RFT
    )
    assert bench.rft.rft_engineer(tmp_path, envs[:1]) is None


def test_a_local_rft_version_counts_only_for_the_steps_asked_now(
    bench: ModuleType, tmp_path: Path
) -> None:
    """A version published here from the same rows and parent, but trained for another number
    of steps or at another learning rate (RFT_EPOCHS or SFT_ARGS changed since), is not the
    RFT engineer: the committed one (or a new run) is."""
    from harness_r1.trainer.model_io import file_sha256

    dataset = tmp_path / "engineer-rft.jsonl"
    dataset.write_text('{"row": 1}\n{"row": 2}\n{"row": 3}\n')
    version = tmp_path / "rft" / "engineer" / "v0001"
    version.mkdir(parents=True)
    rate = float(bench.settings.option_value(bench.settings.SFT_ARGS, "--learning-rate"))

    def publish(steps: int, learning_rate: float) -> None:
        meta = {
            "dataset": {"sha256": file_sha256(dataset)},
            "steps": steps,
            "settings": {"learning_rate": learning_rate},
            "parent_path": str(bench.rft.rft_parent(tmp_path)),
        }
        (version / "metadata.json").write_text(json.dumps(meta))

    publish(bench.rft.rft_steps(3), rate)
    assert bench.rft.rft_engineer(tmp_path) == version
    committed = bench.settings.COMMITTED_RFT
    fallback = committed if (committed / "lineage.json").exists() else None
    publish(bench.rft.rft_steps(3) + 1, rate)
    assert bench.rft.rft_engineer(tmp_path) == fallback
    publish(bench.rft.rft_steps(3), rate * 2)
    assert bench.rft.rft_engineer(tmp_path) == fallback


def test_other_grpo_steps_are_another_engineer(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--grpo-steps` reaches `train grpo online` and every lineage GRPO is compared by: a
    run asked for another count takes neither the committed 100-step engineer, nor a carried
    checkpoint, nor a local version trained for another count."""
    default = bench.settings.grpo_args()
    assert bench.settings.option_value(default, "--max-steps") == "100"
    sft = bench.settings.COMMITTED_SFT
    carried = tmp_path / "grpo-checkpoint"
    carried.mkdir()
    weights = bench.common.weights_sha(sft)
    lineage = {"sft_weights": weights, "grpo_args": default, "envs": ["webshop"]}
    (carried / "lineage.json").write_text(json.dumps(lineage))
    monkeypatch.setattr(bench.grpo, "CARRIED_GRPO", carried)  # what `carried_grpo` reads
    local = tmp_path / "engineer" / "engineer" / "v0001"
    local.mkdir(parents=True)
    meta = {"kind": "grpo", "parent_path": str(sft), "settings": {"max_steps": 24}}
    (local / "metadata.json").write_text(json.dumps(meta))
    committed = bench.settings.COMMITTED_GRPO
    assert bench.grpo.grpo_engineer(tmp_path) == committed  # not the 24-step version
    assert bench.grpo.carried_grpo(sft, ["webshop"]) == carried
    try:
        bench.settings.use_grpo_steps(24)
        assert bench.settings.grpo_args() == [*default[:3], "24", *default[4:]]
        assert bench.grpo.grpo_engineer(tmp_path) == local
        assert bench.grpo.carried_grpo(sft, ["webshop"]) is None
        bench.settings.use_grpo_steps(20)
        assert bench.grpo.grpo_engineer(tmp_path) is None
    finally:
        bench.settings.use_grpo_steps(None)
    assert bench.settings.grpo_args() == default


def test_grpo_steps_are_for_another_target_only() -> None:
    """A shorter GRPO against SmolLM2 would replace its committed engineer and curve."""
    import subprocess

    for args in (
        ["--grpo-steps", "20"],
        ["--grpo-steps", "20", "--target-policy", "smollm2"],
        ["--grpo-steps", "0", "--target-policy", "gemma3"],
    ):
        done = subprocess.run(
            [sys.executable, str(PACKAGE), "--stages", "grpo", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "--grpo-steps takes a positive count, with --target-policy only" in done.stderr


@pytest.mark.integration
def test_a_cold_start_against_another_target_gives_packets_only(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against another target (the tuned one) the cold start gives GRPO the packets of that
    target's failures, carrying the env's incumbent for GRPO's canary, train-only, with no
    teacher round: the engineer starts from the committed SFT engineer, the same cold start;
    another target's run into the same DIR stops rather than take them. Real DBBench
    episodes under the committed incumbent (in the isolated sandbox, as `eval --on` runs it) of
    a test double standing in for the target (it answers junk: every task fails)."""
    from harness_r1.cli.jobs.canary import load_incumbent
    from harness_r1.daemon.settings import Settings
    from harness_r1.envs import get_suite
    from harness_r1.harness import EpisodeSpec, HarnessRuntime, RunConfig
    from harness_r1.harness.policies import ScriptedPolicy
    from harness_r1.sandbox.executor import IsolatedHooks
    from harness_r1.sandbox.sandbox_config import SandboxConfig

    root = Settings().data_root()
    suite = get_suite("dbbench")
    tasks = suite.load_tasks(root, "standard")[:8]
    incumbent = load_incumbent([Path(bench.common.incumbent_on("dbbench", tmp_path)[1])], "dbbench")
    hooks = IsolatedHooks(incumbent.patch, SandboxConfig(), overlay_id=incumbent.overlay_id)
    runtime = HarnessRuntime(suite, ScriptedPolicy(lambda _: "junk"), root, RunConfig(max_steps=2))
    try:
        episodes = runtime.run(
            [
                EpisodeSpec(task=t, seed=i, hooks=hooks, trajectory_id=f"t{i}")
                for i, t in enumerate(tasks)
            ]  # fmt: skip
        )
    finally:
        runtime.close()
        hooks.close()
    runs = tmp_path / "dbbench-train-incumbent.jsonl"
    runs.write_text("".join(t.model_dump_json() + "\n" for t in episodes))
    try:
        bench.settings.use_target_policy(str(tmp_path / "tuned"))
        commands = record_commands(bench, monkeypatch)
        summary = bench.coldstart.stage_coldstart("dbbench", tmp_path, tmp_path / "log")
        assert [c for c in commands if "coldstart" in c] == []  # no teacher round
        assert summary["packets"] == 2 and summary["kept"] is None
        folder = tmp_path / "dbbench-engineer-coldstart"
        stats = json.loads((folder / "stats.json").read_text())
        assert stats == {"packets_only": True, "packets": 2, "target": bench.settings.target_name()}
        assert not (folder / "dataset.jsonl").exists()
        rows = bench.common.trajectories(folder / "packets.jsonl")
        assert sorted(t for row in rows for t in row["task_ids"]) == sorted(
            t.task_id for t in tasks
        )
        bench.coldstart.assert_packets_train_only("dbbench", folder)
        assert (
            bench.coldstart.canaried_digest(folder)
            == bench.common.incumbent_digest("dbbench", tmp_path)
            != "base"
        )
        packets = bench.grpo.grpo_packets(["dbbench"], tmp_path)
        assert bench.grpo.packet_ids(packets) == [row["packet_id"] for row in rows]
        bench.coldstart.packets_only("dbbench", tmp_path, runs)  # this target's: kept
        bench.settings.use_target_policy(str(tmp_path / "other"))
        with pytest.raises(AssertionError, match="-tuned's packets: use a fresh --out"):
            bench.coldstart.packets_only("dbbench", tmp_path, runs)
    finally:
        bench.settings.use_target_policy(None)
