#!/usr/bin/env bash
# Vanilla success of the embedded target (SmolLM2-135M-Instruct, greedy, base harness) on
# 30 tasks per env. Results go into BENCHMARKS.md by hand, with this command.
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
mkdir -p runs
$HR eval --env dbbench --split dev --limit 30 --seed 0 --out runs/vanilla-dbbench.jsonl
$HR eval --env webshop --split fixed --limit 30 --seed 0 --out runs/vanilla-webshop.jsonl
$HR eval --env alfworld --split valid_seen --limit 30 --seed 0 --max-steps 20 --out runs/vanilla-alfworld.jsonl
