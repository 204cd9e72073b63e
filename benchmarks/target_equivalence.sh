#!/usr/bin/env bash
# Issue 16, deliverable 3 and the vanilla rows under the new default: each env's 30 tasks
# (seeds 0..29, greedy, the vanilla benchmark's settings) run under each configuration (all
# with the prefix cache and lockstep decode), wall times printed, and each run's agreement
# with the first one (the reference).
#   VARIANTS: ";"-separated "name flags..." (default: fp32 without prompt-lookup drafts as
#   the reference, fp32 with drafts, bf16 with drafts)
#   ENVS=dbbench bash benchmarks/target_equivalence.sh runs one env.
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
PY=${PY:-.venv/bin/python}
# the target these numbers were measured on: the embedded base model (TARGET=smollm2-agent
# measures the deployed agent, the CLI's default)
TARGET=${TARGET:-smollm2}
COMMON="--limit ${LIMIT:-30} --seed 0 --lockstep 8 --history-turns 3 --max-new-tokens 64 --policy $TARGET"
VARIANTS=${VARIANTS:-"fp32-nodraft --dtype float32 --draft-tokens 0;fp32 --dtype float32;bf16 --dtype bfloat16"}
declare -A SPLIT=([alfworld]=valid_seen [dbbench]=dev [webshop]=fixed)
declare -A STEPS=([alfworld]=20 [dbbench]=10 [webshop]=10)
mkdir -p runs
IFS=';' read -r -a variants <<< "$VARIANTS"
for env in ${ENVS:-dbbench webshop alfworld}; do
  reference=""
  for variant in "${variants[@]}"; do
    read -r name flags <<< "$variant"
    out=runs/eq-$env-$name.jsonl
    start=$(date +%s)
    # shellcheck disable=SC2086 # flags are words
    $HR eval --env "$env" --split "${SPLIT[$env]}" --max-steps "${STEPS[$env]}" $COMMON \
      ${flags:-} --out "$out"
    echo "$env $name wall $(( $(date +%s) - start )) s"
    if [[ -z "$reference" ]]; then
      reference=$out
    else
      echo "$env: $name against ${variants[0]%% *}"
      $PY benchmarks/target_equivalence.py "$reference" "$out"
    fi
  done
done
