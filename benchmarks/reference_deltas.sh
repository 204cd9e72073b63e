#!/usr/bin/env bash
# Deltas of the hand-written reference patches on the frozen SmolLM2-135M (greedy), measured by
# the canary: same tasks, same seeds, with and without the patch; guard set = other tasks of the
# split. Step limits, context and task counts are cut to fit 2 CPU cores (stated in
# BENCHMARKS.md). ALFWorld: 30 tasks, no guard set (its baseline doubles as the vanilla
# ALFWorld number; the gate then says "inconclusive", as it must without a guard set).
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
P=harness_r1/sandbox/reference_patches
COMMON="--seed 0 --history-turns 3 --max-new-tokens 64 --min-guard 16"
mkdir -p runs
$HR canary --env dbbench --split dev --limit 20 --guard-limit 20 --max-steps 8 --control \
  --lockstep 8 $COMMON --patch $P/dbbench_lookup.patch --out runs/ref-dbbench.json
$HR canary --env alfworld --split valid_seen --limit 30 --guard-limit 0 --max-steps 12 \
  --lockstep 10 $COMMON --patch $P/alfworld_explorer.patch --out runs/ref-alfworld.json
$HR canary --env webshop --split fixed --limit 16 --guard-limit 16 --max-steps 8 \
  --lockstep 8 $COMMON --patch $P/webshop_shopper.patch --out runs/ref-webshop.json
