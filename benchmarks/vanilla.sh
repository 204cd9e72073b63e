#!/usr/bin/env bash
# Vanilla success of the embedded target (SmolLM2-135M-Instruct, greedy, base harness) on
# 30 tasks per env, 8 episodes in lockstep. Step limits and context are cut to fit a 2-core
# CPU budget (history 3 exchanges, 64 new tokens); BENCHMARKS.md states them with the numbers.
# ALFWorld vanilla numbers come from the baseline half of its reference-patch canary
# (benchmarks/reference_deltas.sh: the same 30 tasks and seeds), which saves a second pass.
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
# the target these numbers were measured on: the embedded base model (TARGET=smollm2-agent
# measures the deployed agent, the CLI's default)
TARGET=${TARGET:-smollm2}
COMMON="--limit 30 --seed 0 --lockstep 8 --history-turns 3 --max-new-tokens 64 --policy $TARGET"
mkdir -p runs
$HR eval --env dbbench --split dev --max-steps 10 $COMMON --out runs/vanilla-dbbench.jsonl
$HR eval --env webshop --split fixed --max-steps 10 $COMMON --out runs/vanilla-webshop.jsonl
