#!/usr/bin/env bash
# Vanilla success (base harness, no overlay: forced share 0) of the base embedded model and of
# the deployed agent on the held-out splits the agent never trained on: ALFWorld valid_seen
# (ALF_LIMIT games spread over the split, default 8: one lockstep batch, ~10 min a model on 2
# cores at 35 steps a game), DBBench dev (60), WebShop goals 40-59 (fixed_heldout, 20).
# Greedy, the default run config (history 6 exchanges, 96 new tokens, the tasks' step limits).
# Then benchmarks/deployed_agent.py prints the tables BENCHMARKS.md holds.
#   POLICIES="smollm2 smollm2-agent" bash benchmarks/deployed_agent.sh
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/deployed-agent}
POLICIES=${POLICIES:-"smollm2 smollm2-agent"}
ALF_LIMIT=${ALF_LIMIT:-8}
ENVS=${ENVS:-"dbbench webshop alfworld"}
mkdir -p "$OUT"
declare -A SPLIT=([dbbench]=dev [webshop]=fixed_heldout [alfworld]=valid_seen)
declare -A LIMIT=([dbbench]=60 [webshop]=20 [alfworld]=$ALF_LIMIT)
for policy in $POLICIES; do
  for env in $ENVS; do
    $HR eval --env "$env" --split "${SPLIT[$env]}" --limit "${LIMIT[$env]}" --policy "$policy" \
      --seed 0 --out "$OUT/$policy-$env.jsonl"
  done
done
$PY benchmarks/deployed_agent.py "$OUT" --policies $POLICIES --json "$OUT/summary.json"
