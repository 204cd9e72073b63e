#!/usr/bin/env bash
# Deltas of the hand-written reference patches on the frozen SmolLM2-135M (greedy), measured by
# the canary: same tasks, same seeds, with and without the patch, the patch in the isolated
# worker. Sized to fit an hour on 2 cores: no guard sets (the gate then answers "inconclusive",
# as it must), short step limits, 3 past exchanges, 64 new tokens. ALFWorld's baseline half
# doubles as the vanilla ALFWorld number (30 tasks). A fuller run: add --guard-limit 20
# --control and raise --max-steps.
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
P=harness_r1/sandbox/reference_patches
# the target these numbers were measured on: the embedded base model (TARGET=smollm2-agent
# measures the deployed agent, the CLI's default)
TARGET=${TARGET:-smollm2}
COMMON="--seed 0 --history-turns 3 --max-new-tokens 64 --lockstep 10 --guard-limit 0 --policy $TARGET"
mkdir -p runs
$HR canary --env alfworld --split valid_seen --limit 30 --guard-limit 0 --max-steps 20 --prefix-cache $COMMON \
  --patch $P/alfworld_explorer.patch --out runs/ref-alfworld.json
$HR canary --env dbbench --split dev --limit 20 --guard-limit 0 --max-steps 6 $COMMON \
  --patch $P/dbbench_lookup.patch --out runs/ref-dbbench.json
$HR canary --env webshop --split fixed --limit 10 --guard-limit 0 --max-steps 6 $COMMON \
  --patch $P/webshop_shopper.patch --out runs/ref-webshop.json
