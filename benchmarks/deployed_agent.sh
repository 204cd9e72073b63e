#!/usr/bin/env bash
# Vanilla success (base harness, no overlay: forced share 0) of the base embedded model and of
# the deployed agent on the held-out splits the agent never trained on: ALFWorld valid_seen (30
# games spread over the split), DBBench dev (60), WebShop goals 40-59 (fixed_heldout, 20).
# Greedy, the default run config (history 6 exchanges, 96 new tokens, the tasks' step limits).
# Then benchmarks/deployed_agent.py prints the tables BENCHMARKS.md holds.
#   POLICIES="smollm2 smollm2-agent" bash benchmarks/deployed_agent.sh
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/deployed-agent}
POLICIES=${POLICIES:-"smollm2 smollm2-agent"}
mkdir -p "$OUT"
for policy in $POLICIES; do
  $HR eval --env dbbench --split dev --policy "$policy" --seed 0 --out "$OUT/$policy-dbbench.jsonl"
  $HR eval --env webshop --split fixed_heldout --policy "$policy" --seed 0 --out "$OUT/$policy-webshop.jsonl"
  $HR eval --env alfworld --split valid_seen --limit 30 --policy "$policy" --seed 0 --out "$OUT/$policy-alfworld.jsonl"
done
$PY benchmarks/deployed_agent.py "$OUT" --policies $POLICIES --json "$OUT/summary.json"
