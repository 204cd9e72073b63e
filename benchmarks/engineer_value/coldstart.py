"""Stage coldstart (3): the rows the engineers are first taught.

The target on COLDSTART_TASKS training tasks under the incumbent; the template teacher's
one-template proposals on its failures, composed onto the incumbent and canaried against it;
the lean prompt in every row. The kept rows go into the repository without their prompts (the
prompts hold task data, the completions do not), and a later run rebuilds the prompts from
regenerated runs (`restore_coldstart`) instead of paying hours of canary again. Against another
target (`--target-policy`) the cold start is that target's packets only, for GRPO. Every packet
is asserted to come from the training split.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from .common import (
    assert_train_only,
    incumbent_digest,
    incumbent_on,
    rate,
    run,
    target_runs,
    trajectories,
)
from .settings import (
    BATCH,
    COLDSTART_EXTRA,
    COLDSTART_TASKS,
    COMMITTED,
    DEFAULT_ENVS,
    HR,
    MIN_COLDSTART_ROWS,
    SEED,
    SPLITS,
    TARGET,
    TARGET_POLICY,
    K,
    target_name,
)


def canaried_digest(folder: Path) -> str:
    """What a cold start's candidates were canaried against, as `train coldstart` recorded it
    in each packet (the incumbent's links), in `incumbent_digest`'s terms."""
    from harness_r1.contracts import Patch

    digests = {
        "+".join(Patch.model_validate(link["patch"]).sha256() for link in row["incumbent"]["links"])
        or "base"
        for row in trajectories(folder / "packets.jsonl")
    }
    assert len(digests) == 1, f"{folder}: packets canaried against {len(digests)} incumbents"
    return digests.pop()


def assert_packets_train_only(env: str, folder: Path) -> None:
    assert_train_only(env, trajectories(folder / "packets.jsonl"))


def stage_coldstart(env: str, out: Path, log: Path) -> dict[str, Any]:
    """Stage 3: the engineers' cold start. The target on COLDSTART_TASKS training tasks under the
    incumbent; its failures in packets of BATCH; K template-teacher proposals per packet, each
    composed onto the incumbent and canaried against it; the lean prompt in every row."""
    train, _ = SPLITS[env]
    on = incumbent_on(env, out)
    runs = out / f"{env}-train-incumbent.jsonl"
    target_runs(env, train, COLDSTART_TASKS[env], SEED, on, runs, log)
    folder = out / f"{env}-engineer-coldstart"
    if TARGET_POLICY:
        packets_only(env, out, runs)
    elif not (folder / "stats.json").exists() and not restore_coldstart(env, out, runs):
        run([HR, "train", "coldstart", str(runs), "--env", env, "--split", train,
             "--out", str(folder), "-k", str(K), "--batch-size", str(BATCH), *on,
             *COLDSTART_EXTRA, "--baseline-cache", str(out / "baselines"), *TARGET,
             *TARGET_POLICY],
            log)  # fmt: skip
    assert_packets_train_only(env, folder)
    canaried, now = canaried_digest(folder), incumbent_digest(env, out)
    assert canaried == now, f"{folder} was canaried against another incumbent: delete it to redo"
    stats = json.loads((folder / "stats.json").read_text())
    if not stats.get("restored"):
        export_coldstart(env, out, canaried)
    dataset = folder / "dataset.jsonl"
    kept = trajectories(dataset) if dataset.exists() else []  # none: `packets_only`
    deltas = [row["metadata"]["delta_success"] for row in kept]
    return {
        "train_runs_under_incumbent": rate(runs),
        "packets": stats.get("packets"),
        "proposals": stats.get("proposals"),
        "kept": stats.get("kept"),
        "rejected": stats.get("rejected"),
        "kept_mean_delta": sum(deltas) / len(deltas) if deltas else None,
        "kept_improving": sum(d > 0 for d in deltas),
        "kept_templates": stats.get("kept_templates"),
    }


def export_coldstart(env: str, out: Path, incumbent_sha256: str) -> int:
    """The env's kept rows without their prompts, into the repository (COMMITTED): the
    teacher's completions and their canary provenance hold no task data (asserted: no ten words
    in a row of a packet's task instruction appear in a completion; DBBench's boilerplate "the
    name of this table is" is shorter), the prompts do. `restore_coldstart`
    rebuilds the prompts from regenerated training runs, so a later run trains on the
    same rows without paying the canary again. `incumbent_sha256`: what the canary ran against
    (`canaried_digest`), kept in each row."""
    if TARGET_POLICY:
        return 0  # another target's cold start is packets only (`packets_only`): no rows
    folder = out / f"{env}-engineer-coldstart"
    packets = {row["packet_id"]: row for row in trajectories(folder / "packets.jsonl")}
    rows = []
    for row in trajectories(folder / "dataset.jsonl"):
        text = " ".join(re.findall(r"\w+", row["completion"][-1]["content"].lower()))
        for episode in packets[row["metadata"]["packet_id"]]["packet"]["episodes"]:
            words = re.findall(r"\w+", episode["instruction"].lower())
            for start in range(max(0, len(words) - 9)):  # ten words in a row: task text
                shingle = " ".join(words[start : start + 10])
                assert shingle not in text, f"{env}: a completion holds task text: {shingle!r}"
        meta = {**row["metadata"], "incumbent_sha256": incumbent_sha256}
        rows.append({"completion": row["completion"], "metadata": meta})
    path = COMMITTED / "coldstart" / f"{env}-rows.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return len(rows)


def restore_coldstart(env: str, out: Path, runs: Path) -> bool:
    """The env's cold start from the committed rows: packets rebuilt from `runs` (the training
    runs under the incumbent, regenerated), prompts from the packets. Writes the folder `train
    coldstart` would (dataset.jsonl, packets.jsonl, stats.json with `restored`); False when
    nothing is committed or the rows were canaried against another incumbent than the env's
    now (`incumbent_sha256` in each row). The committed rows are only read.

    A row finds its packet by the tasks its canary ran (`task_ids` in its metadata), else by
    packet id, else by the packet sharing most of its tasks (at least half): greedy text is
    reproducible on one CPU kind, not across them (bf16 kernels differ: DBBench's and
    ALFWorld's runs regenerated on an AMX host differed from the AVX512 host's), so an outcome
    can flip and change which of a chunk's tasks fail, hence the packet's task set, by one. Such
    a row keeps its canary delta (measured on its own tasks) and gets the prompt of the
    regenerated packet of the same chunk. Rows without a packet are dropped and counted; how
    each row was matched is in stats.json."""
    committed = COMMITTED / "coldstart" / f"{env}-rows.jsonl"
    if TARGET_POLICY or not committed.exists():  # the committed rows were canaried on SmolLM2
        return False
    committed_rows = trajectories(committed)
    against = {row["metadata"].get("incumbent_sha256") for row in committed_rows}
    if against != {incumbent_digest(env, out)}:
        print(f"{env}: the committed cold start was canaried against another incumbent "
              f"({sorted(map(str, against))}): it runs again")  # fmt: skip
        return False
    from harness_r1.trainer import PromptConfig, engineer_messages

    sources = training_sources(env, out, runs)
    rows, missing, how = [], 0, Counter[str]()
    used: dict[str, Any] = {}
    for row in committed_rows:
        way, source = packet_of(row["metadata"], sources)
        if source is None:
            missing += 1
            continue
        how[way] += 1
        used[source.packet.packet_id] = source
        prompt = engineer_messages(source.packet, config=PromptConfig(lean=True))
        meta = {**row["metadata"], "packet_id": source.packet.packet_id,
                "committed_packet_id": row["metadata"]["packet_id"]}  # fmt: skip
        rows.append({"prompt": prompt, **row, "metadata": meta})
    folder = out / f"{env}-engineer-coldstart"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_packets(folder, list(used.values()))
    stats = {"restored": True, "packets": len(used), "kept": len(rows), "missing_rows": missing,
             "matched_by": dict(how)}  # fmt: skip
    (folder / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"{env}: restored {len(rows)} rows of {len(used)} packets ({missing} not rebuilt; "
          f"matched by {dict(how)})")  # fmt: skip
    return True


def training_sources(env: str, out: Path, runs: Path) -> list[Any]:
    """The packet sources `train coldstart` would draw from `runs` (the training runs under the
    incumbent): their failures in packets of BATCH, each with its canary batch and incumbent."""
    from harness_r1.cli.jobs import load_incumbent
    from harness_r1.envs import default_data_root
    from harness_r1.trainer import SourceConfig, sources_from_runs

    on = [Path(p) for p in incumbent_on(env, out)[1::2]]
    root = default_data_root()
    assert root is not None
    config = SourceConfig(batch_size=BATCH, incumbent=load_incumbent(on, env))
    return sources_from_runs([runs], env, SPLITS[env][0], root, config)


def packets_only(env: str, out: Path, runs: Path) -> None:
    """The cold start against another target (`--target-policy`): its failures' packets for
    GRPO, without the teacher's proposals and their canary. The engineer retrained against
    that target starts from the committed SFT engineer, "from the same cold start" (issue 20):
    its rows stand, so a teacher round against the new target would teach nothing and cost
    ~15-50 min an env. Writes packets.jsonl and stats.json (`packets_only`), no dataset; kept
    when they are this target's (DIR's run files are keyed by name: another target's run
    into the same DIR must not take them for its own)."""
    folder = out / f"{env}-engineer-coldstart"
    stats_file = folder / "stats.json"
    if stats_file.exists():
        target = json.loads(stats_file.read_text()).get("target")
        assert target == target_name(), f"{folder} holds {target}'s packets: use a fresh --out"
        return
    sources = training_sources(env, out, runs)
    assert sources, f"{env}: the target failed no training task under the incumbent: no packet"
    folder.mkdir(parents=True, exist_ok=True)
    write_packets(folder, sources)
    stats = {"packets_only": True, "packets": len(sources), "target": target_name()}
    (folder / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"{env}: {len(sources)} packets of the target's failures, no teacher round")


def write_packets(folder: Path, sources: list[Any]) -> None:
    """The packet sources as `train coldstart` writes them (packets.jsonl)."""
    from harness_r1.trainer import packet_row

    rows = "".join(json.dumps(packet_row(source)) + "\n" for source in sources)
    (folder / "packets.jsonl").write_text(rows)


def packet_of(meta: dict[str, Any], sources: list[Any]) -> tuple[str, Any]:
    """(how, source) for a committed row: its canary's exact task set, its packet id, or the
    unique source sharing the most of its tasks (at least half); ("", None) when none does."""
    tasks = set(meta.get("task_ids") or ())
    for source in sources:
        if tasks and set(source_tasks(source)) == tasks:
            return "tasks", source
    for source in sources:
        if source.packet.packet_id == meta["packet_id"]:
            return "packet id", source
    shared = sorted(((len(tasks & set(source_tasks(s))), i) for i, s in enumerate(sources)),
                    reverse=True)  # fmt: skip
    best = shared[0][0] if shared else 0
    unique = len(shared) == 1 or (len(shared) > 1 and shared[1][0] < best)
    if tasks and 2 * best >= len(tasks) and unique:
        return "most shared tasks", sources[shared[0][1]]
    return "", None


def source_tasks(source: Any) -> tuple[str, ...]:
    """The task ids a packet source's canary runs, sorted."""
    return tuple(sorted(task.task_id for task in source.tasks))


def merge_coldstart(envs: list[str], out: Path) -> int:
    """All envs' kept rows in one SFT dataset (env order, then file order: deterministic), each
    prompt rebuilt from its packet by the current lean prompt (what the engineer will read at
    evaluation and in GRPO, even if the prompt changed since the rows were written) and each
    completion written in the current output format (`current_format`)."""
    rows = [row for env in envs for row in coldstart_rows(env, out)]
    path = out / "engineer-coldstart.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return len(rows)


def coldstart_rows(env: str, out: Path) -> list[dict[str, Any]]:
    """The env's kept cold-start rows in file order, each prompt rebuilt from its packet by the
    current lean prompt and each completion in the current output format (`merge_coldstart`)."""
    from harness_r1.contracts import FailurePacket
    from harness_r1.trainer import PromptConfig, engineer_messages

    folder = out / f"{env}-engineer-coldstart"
    packets = {
        row["packet_id"]: FailurePacket.model_validate(row["packet"])
        for row in trajectories(folder / "packets.jsonl")
    }
    rows = []
    for row in trajectories(folder / "dataset.jsonl"):
        packet = packets[row["metadata"]["packet_id"]]
        prompt = engineer_messages(packet, config=PromptConfig(lean=True))
        completion = current_format(row["completion"], env)
        rows.append({**row, "prompt": prompt, "completion": completion})
    return rows


def current_format(completion: list[dict[str, str]], env: str) -> list[dict[str, str]]:
    """A teacher's completion written in the current output format: a template call
    (`harness_r1.trainer.template_calls`: the think block and the description line naming the
    templates and their parameters, no code), which renders the teacher's patch; the committed
    rows were written as `<patch>{json}</patch>`. The think line is carried over as written;
    the template choices are the same (asserted: the call renders a patch with the row's
    description). A template that adapts to the packet (ALFWorld's and WebShop's skills,
    DBBench's hints by query type) renders its general form from a call; the choice the row
    teaches is the same."""
    from harness_r1.sandbox import parse_engineer_output
    from harness_r1.trainer import call_of, template_call

    parsed = parse_engineer_output(completion[-1]["content"], env=env)
    if parsed.patch is None:
        raise ValueError(f"{env}: a committed row does not parse: {parsed.message}")
    text = call_of(parsed.patch, parsed.think)
    if text is None:
        raise ValueError(f"{env}: a committed row is no template teacher's patch")
    call = template_call(text, env)
    if call is None or call.patch is None or call.patch.description != parsed.patch.description:
        raise ValueError(f"{env}: a committed row's call does not render its templates")
    return [*completion[:-1], {**completion[-1], "content": text}]


def run_coldstart(envs: list[str], out: Path, log: Path) -> None:
    """The cold start of `envs`; the SFT dataset merges them only when they are all of
    DEFAULT_ENVS: the engineer is taught on the three envs together, and a run for some envs
    (the packets GRPO on one env reads) must not leave a one-env dataset that `sft_version`
    would take for a new cold start (the committed engineer serves then)."""
    summary: dict[str, Any] = {env: stage_coldstart(env, out, log) for env in envs}
    if sorted(envs) != sorted(DEFAULT_ENVS) or TARGET_POLICY:
        print(json.dumps(summary, indent=2))
        print(f"cold start of {envs} against {TARGET_POLICY or 'SmolLM2'}: packets only, the "
              "SFT dataset (SmolLM2's, all three envs) is not merged")  # fmt: skip
        return
    summary["total_kept"] = merge_coldstart(list(DEFAULT_ENVS), out)  # the committed row order
    (out / "results-coldstart.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    assert summary["total_kept"] >= MIN_COLDSTART_ROWS, "too few rows"
