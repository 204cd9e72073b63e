#!/usr/bin/env bash
# Who decides in the committed results: the engineer-value incumbents (the deployed harnesses
# the engineer comparison was measured on) judged by the canary on their held-out splits, as
# candidates on the base harness: each prints its delta, its forced share (per-step origins)
# and its patch-alone success (the same overlay under the null policy: no model). The
# reference patches' rows come from benchmarks/reference_deltas.sh (same columns).
# Settings as the engineer comparison ran the target (benchmarks/engineer_value/settings.py TARGET).
# Rows: .venv/bin/python benchmarks/reference_rows.py runs/who-*.json
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
R=benchmarks/results/engineer_value
# the target these numbers were measured on: the embedded base model (TARGET=smollm2-agent
# measures the deployed agent, the CLI's default)
TARGET=${TARGET:-smollm2}
COMMON="--seed 0 --history-turns 3 --max-new-tokens 64 --lockstep 10 --guard-limit 0 --policy $TARGET"
mkdir -p runs
$HR canary --env webshop --split fixed_heldout --limit 20 --guard-limit 0 --max-steps 6 $COMMON \
  --patch $R/webshop-incumbent.txt --out runs/who-webshop-incumbent.json
$HR canary --env dbbench --split dev --limit 20 --guard-limit 0 --max-steps 6 $COMMON \
  --patch $R/dbbench-incumbent.txt --out runs/who-dbbench-incumbent.json
$HR canary --env alfworld --split valid_seen --limit 20 --guard-limit 0 --max-steps 6 $COMMON \
  --patch $R/alfworld-incumbent.txt --out runs/who-alfworld-incumbent.json
