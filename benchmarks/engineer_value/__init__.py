"""Issue 20, the engineer's value at CPU scale: the paper's comparison on held-out tasks.

    .venv/bin/python benchmarks/engineer_value --stages all [--envs ...] [--out DIR]
    .venv/bin/python benchmarks/engineer_value --stages coldstart,sft   # some stages
    .venv/bin/python benchmarks/engineer_value --stages coldstart --envs webshop   # packets
    .venv/bin/python benchmarks/engineer_value --stages coldstart,grpo,engineers \
        --target-policy runs/engineer-value/coevolution/target-DIGEST/tuned-v0001 \
        --out runs/ev-tuned [--envs webshop --grpo-steps 20]

(`python -m benchmarks.engineer_value ...` from the repository root runs the same.)

Does a trained harness engineer beat the template teacher it was taught by, and the base and
deployed harnesses, on tasks it never saw? The engineer (SmolLM2-135M with LoRA) writes patches
for the frozen target's failures; every patch is judged by the canary against the deployed
harness, on the held-out split.

A cold start of some envs gives their packets (GRPO on them) but no SFT dataset, which is always
all three envs. `--target-policy` runs every stage against another target: above, the
coevolution stage's tuned checkpoint, the paper's engineer retrained against the tuned target
"from the same cold start" (the committed SFT engineer; the cold start against the tuned
target is packets only, its failures, which GRPO trains on: no teacher round). Its results
go to a repository folder of their own (`results_home`: against-target-DIGEST-tuned-v0001-
VERSION/, VERSION the checkpoint's content).
`--grpo-steps` sets GRPO's optimizer steps where a run of a few hours cannot hold GRPO_ARGS'
100.

Every step is a `harness-r1` command (printed, and kept with its wall time in DIR/commands.log).
Stages, per env (ALFWorld train / valid_seen, DBBench standard / dev, WebShop goals 0-39 /
40-59; held-out tasks never reach a packet, a cold-start row or a GRPO group: asserted on the
files):
- baselines: the frozen target on the training split (base harness); one round of the template
  teacher on its failures (`train coldstart`, K per packet, canaried on the packet's tasks): the
  kept patch with the best delta (whole, or the part DEPLOYED_TEMPLATES keeps) is the
  **incumbent**, the deployed harness every engineer is trained and judged against
  (`<env>-incumbent.txt`, also committed; written by hand where HAND_DEPLOYED says so,
  ALFWorld's, and then no teacher round runs); on the held-out split the
  base harness, the incumbent, and the incumbent with Self-Refine. With `--teacher` (stage 2)
  the teacher on held-out packets as in the first report.
- deployed: how the incumbent was chosen where it keeps only part of stage 1's best patch
  (DEPLOYED_TEMPLATES): the target on the training split under each subset of its templates;
  for a hand-written one (HAND_DEPLOYED): base, incumbent, incumbent + the template it leaves
  to a patch, the whole reference patch.
- coldstart: the engineers' cold start. The target on COLDSTART_TASKS training tasks under the
  incumbent; the template teacher's one-template proposals on its failures, composed onto the
  incumbent and canaried against it; the lean prompt. Its kept rows go into the repository
  without prompts (no task data), and a later run rebuilds the prompts from regenerated runs
  instead of paying the canary again (`restore_coldstart`).
- sft: LoRA SFT of SmolLM2-135M on the merged rows, every checkpoint kept; each checkpoint's
  valid fraction on held-out packets without a canary (the SFT curve, PNG).
- sampling: the SFT engineer's held-out validity at several temperatures (the table's choice).
- grpo: online GRPO from the SFT engineer on the cold start's packets (reward: canary delta
  over the incumbent). `--grpo-minutes M`: pause before M minutes and commit the checkpoint;
  the next run (later, on another host too) continues it.
- rft: rejection-sampling fine-tuning, the SFT+GRPO engineer continued by SFT on the cold
  start's rows that beat the incumbent in their canary (`--envs`: whose rows), each env's
  rows repeated round(largest env's count / its count) times.
- engineers: the table's engineer rows on held-out packets against the incumbent (untrained,
  template teacher, SFT, SFT+GRPO, SFT+GRPO+RFT): valid fraction, mean canary delta, proposals
  the gate promotes (guard: the other held-out tasks), held-out success after the best
  promoted patch.
- headroom: the held-out success under the incumbent with the env's hand-written reference
  patch on top (never trained on): how much a patch could still win on these tasks.
- ablation: the most trained engineer with each hook removed from what it may write.
- transfer: Gemma 3 270M as the target, under the incumbent and each engineer's best patch.
- coevolution: the target fine-tuned on its own successes under the deployed harness (the
  incumbent plus the final engineer's best promoted patch), held out under the base harness,
  the incumbent and the deployed harness, beside the frozen target.
- reach: what the trained engineers (`--engineers`) sample at K=16, temperature 1.0 on the
  held-out packets (validity only), counted by template: which calls GRPO's reward can reach.

Resumable: a step whose output exists is skipped (delete an output to redo it); training runs
resume from their last checkpoint. Results: DIR/results-*.json, tables on stdout, PNGs in DIR.

Modules:
- __main__.py: runs the command line, as `python benchmarks/engineer_value` or
  `python -m benchmarks.engineer_value`
- ablation.py: stage ablation: the final engineer with each hook removed
- baselines.py: stage baselines (and the teacher of `--teacher`): the incumbent and the
  held-out baselines
- cli.py: the command line, which calls the stages in the order given
- coevolution.py: stage coevolution: the tuned target under each harness
- coldstart.py: stage coldstart: the engineers' cold start, its export to and restore from the
  repository
- common.py: running and logging `harness-r1` commands, the target's run files and rates, the
  incumbent, the held-out checks, where results are kept
- deployed.py: stage deployed: how a partial or hand-written incumbent was chosen
- engineers.py: stage engineers: the comparison table and how each engineer is run
- grpo.py: stage grpo: online GRPO, its carried checkpoint and curve
- headroom.py: stage headroom: the reference patch on top of the incumbent
- reach.py: stage reach: what the trained engineers sample, by template
- rft.py: stage rft: rejection-sampling fine-tuning on the improving cold-start rows
- sampling.py: stage sampling: the SFT engineer's validity per temperature
- settings.py: the run description every stage shares: envs, splits, task counts, the
  target's and the engineers' options, the committed paths, `--target-policy` and
  `--grpo-steps`
- sft.py: stage sft: the SFT engineer, its validity curve, and when the committed one serves
- transfer.py: stage transfer: the patches on Gemma 3 270M
"""
