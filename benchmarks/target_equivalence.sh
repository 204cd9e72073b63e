#!/usr/bin/env bash
# Issue 16, deliverable 3 and the vanilla rows under the new default: each env's 30 tasks
# (seeds 0..29, greedy, the vanilla benchmark's settings) run twice, under the new default
# (auto dtype, prefix cache, lockstep decode) and in fp32 (same engine), wall times printed;
# then the agreement table. ENVS=dbbench bash benchmarks/target_equivalence.sh runs one env.
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
PY=${PY:-.venv/bin/python}
COMMON="--limit ${LIMIT:-30} --seed 0 --lockstep 8 --history-turns 3 --max-new-tokens 64"
declare -A SPLIT=([alfworld]=valid_seen [dbbench]=dev [webshop]=fixed)
declare -A STEPS=([alfworld]=20 [dbbench]=10 [webshop]=10)
mkdir -p runs
for env in ${ENVS:-dbbench webshop alfworld}; do
  for dtype in auto float32; do
    out=runs/eq-$env-$dtype.jsonl
    start=$(date +%s)
    $HR eval --env "$env" --split "${SPLIT[$env]}" --max-steps "${STEPS[$env]}" $COMMON \
      --dtype "$dtype" --out "$out"
    echo "$env $dtype wall $(( $(date +%s) - start )) s"
  done
  $PY benchmarks/target_equivalence.py "runs/eq-$env-float32.jsonl" "runs/eq-$env-auto.jsonl"
done
