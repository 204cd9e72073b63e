#!/usr/bin/env bash
# Every benchmark in BENCHMARKS.md, in order. Output: runs/bench-*.log. Hours on 2 CPU cores:
# the ALFWorld SmolLM2 canary alone takes about an hour (with the prefix cache), the engineer
# run about two.
set -euo pipefail
PY=${PY:-.venv/bin/python}
mkdir -p runs
# the tests too slow for make test (pytest's `slow` marker): whole model conversions
$PY -m pytest -m slow 2>&1 | tee runs/bench-slow-tests.log
bash benchmarks/vanilla.sh 2>&1 | tee runs/bench-vanilla.log
$PY benchmarks/policy_batching.py --env dbbench --split dev --episodes 8 --max-steps 5 2>&1 | tee runs/bench-batching.log
$PY benchmarks/policy_batching.py --env alfworld --split valid_seen --episodes 4 --max-steps 4 --history-turns 3 --max-new-tokens 64 --prefix-cache 2>&1 | tee runs/bench-prefix-cache.log
$PY benchmarks/target_speed.py 2>&1 | tee runs/bench-target-speed.log
bash benchmarks/target_equivalence.sh 2>&1 | tee runs/bench-target-equivalence.log
$PY benchmarks/sandbox_costs.py --calls 2000 --env dbbench --split dev --tasks 8 --max-steps 4 --k 4 2>&1 | tee runs/bench-sandbox.log
bash benchmarks/reference_deltas.sh 2>&1 | tee runs/bench-reference.log
$PY benchmarks/reference_rows.py runs/ref-alfworld.json runs/ref-dbbench.json runs/ref-webshop.json | tee runs/bench-reference-rows.md
bash benchmarks/attribution.sh 2>&1 | tee runs/bench-attribution.log
$PY benchmarks/reference_rows.py runs/who-*.json | tee runs/bench-attribution-rows.md
# the deployed agent (issue 48): vanilla success on the held-out splits beside the base model,
# decisions/s side by side, and every advisory template alone on its WebShop failures
bash benchmarks/deployed_agent.sh 2>&1 | tee runs/bench-deployed-agent.log
$PY benchmarks/deployed_speed.py 2>&1 | tee runs/bench-deployed-speed.log
$PY benchmarks/advisory_sweep.py --env webshop --out runs/advisory-sweep-webshop 2>&1 | tee runs/bench-advisory-sweep.log
$PY benchmarks/deploy_latency.py --clients 20 --releases 50 2>&1 | tee runs/bench-deploy.log
$PY benchmarks/ingest_throughput.py 2>&1 | tee runs/bench-ingest.log
bash benchmarks/engineer_cpu_run.sh 2>&1 | tee runs/bench-engineer.log
$PY benchmarks/engineer_rows.py runs/engineer | tee runs/bench-engineer-rows.md
# issue 20: the engineer's value (hours: cold start, SFT, GRPO, the table); resumable, rerun it
# after an interruption and it continues where it stopped
# (its crosstask stage needs the TextWorld plugin: installed beside the venv, not into it)
$PY -m pip install -q --no-deps --no-build-isolation --target runs/plugins examples/textworld_env
PYTHONPATH=runs/plugins $PY benchmarks/engineer_value --stages all 2>&1 \
    | tee runs/bench-engineer-value.log
# the coevolution's second half: the engineer retrained against the tuned target the stage
# above used (the same cold start's SFT engineer, GRPO on the tuned target's WebShop failures),
# in a folder of that target's own (run files are keyed by name, not by target)
TUNED=$(cat runs/engineer-value/coevolution/tuned-target.txt)
NAME=$($PY -c 'import sys; sys.path.insert(0, "benchmarks")
from engineer_value.settings import policy_name; print(policy_name(sys.argv[1]))' "$TUNED")  # the name its results folder gets
$PY benchmarks/engineer_value --stages coldstart,grpo,engineers --envs webshop \
    --engineers sft,grpo --target-policy "$TUNED" --out "runs/ev-tuned/$NAME" \
    2>&1 | tee runs/bench-engineer-value-tuned.log
