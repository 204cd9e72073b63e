#!/usr/bin/env bash
# The operations runbook (docs/operations.md) walked end to end, its commands in its order,
# against a local broker (`harness-r1 broker`) and a real daemon (`harness-r1 run`): first
# deployment, a file of trajectories published (one with a task the canary cannot replay), the
# dead letters, an overlay released, paused, resumed and rolled back by an operator, a
# partition reset, and a clean stop. Each step checks what the runbook says it shows; the
# first that does not fails the walk (exit 1) with the daemon's log tail.
#   bash benchmarks/runbook_walk.sh            (tests/ops/test_runbook_walk.py runs it)
set -euo pipefail
HR=${HR:-.venv/bin/harness-r1}
PY=${PY:-.venv/bin/python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/runbook-walk-XXXXXX")
PORTS=$($PY -c 'from harness_r1.consumers.broker import free_port as f; print(f(), f())')
BROKER_PORT=${PORTS% *}
METRICS_PORT=${PORTS#* }
BROKER_PID="" DAEMON_PID=""

step() { echo "--- $*"; }
fail() {
  echo "FAILED: $*" >&2
  [ -f "$WORK/daemon.log" ] && tail -c 3000 "$WORK/daemon.log" >&2
  exit 1
}
cleanup() {
  [ -n "$DAEMON_PID" ] && kill -9 "$DAEMON_PID" 2>/dev/null || true
  [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local until=$(( $(date +%s) + $1 )) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$until" ] || fail "timed out waiting for $what"
    sleep 0.5
  done
}
metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | grep -F "$1" | grep -v '^#'; }

step "a local broker for the trial: harness-r1 broker --port $BROKER_PORT"
$HR broker --port "$BROKER_PORT" > "$WORK/broker.log" 2>&1 &
BROKER_PID=$!
wait_for 30 "the broker" grep -q "broker on" "$WORK/broker.log"

step "1. keys: harness-r1 keys generate ops-1 --dir keys"
$HR keys generate ops-1 --dir "$WORK/keys" > /dev/null
[ "$(stat -c %a "$WORK/keys/ops-1.key")" = 600 ] || fail "the private key is not mode 0600"
cat > "$WORK/daemon.yaml" <<EOF
data: ${HARNESS_R1_DATA:-$($PY -c 'from harness_r1.daemon.settings import Settings; print(Settings().data_root())')}
state_url: sqlite:///$WORK/state.db
kafka_bootstrap: 127.0.0.1:$BROKER_PORT
signing_key: $WORK/keys/ops-1.key
keys_dir: $WORK/keys
metrics: {port: $METRICS_PORT, log_level: info}
loop: {batch_size: 1000000, batch_window_s: 1000000000}
EOF
CFG=(--config "$WORK/daemon.yaml")

step "2. topics: topics create --replication-factor 1 (one broker), then topics describe"
$HR "${CFG[@]}" topics create --replication-factor 1 > "$WORK/topics.txt" 2>&1 \
  || fail "topics create: $(cat "$WORK/topics.txt")"
$HR "${CFG[@]}" topics describe > "$WORK/describe.txt" 2>&1 \
  || fail "topics describe says a topic is missing: $(cat "$WORK/describe.txt")"

step "3. start the daemon: harness-r1 run --config daemon.yaml; /readyz says ready"
$HR run "${CFG[@]}" > "$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
wait_for 120 "the daemon to listen" grep -q daemon_listening "$WORK/daemon.log"
wait_for 60 "/readyz ready" sh -c "curl -sf http://127.0.0.1:$METRICS_PORT/readyz | grep -qx ready"
metric 'harness_r1_ready ' | grep -q ' 1.0$' || fail "harness_r1_ready is not 1"
metric 'harness_r1_broker_reachable ' | grep -q ' 1.0$' || fail "broker_reachable is not 1"

step "4. publish a file: --dry-run checks it (a warning for a task it cannot replay), then send"
$PY - "$WORK/run.jsonl" <<'EOF'
import sys
from datetime import UTC, datetime
from harness_r1.contracts import Outcome, TargetRef, TaskRef, Termination, Timings, Trajectory
now = datetime.now(UTC)
lines = []
for i, task in enumerate(["dev-000", "dev-001", "task-7"]):
    lines.append(Trajectory(
        trajectory_id=f"walk-{i}", agent_id="agent-1",
        target=TargetRef(model_id="SmolLM2-135M-Instruct-agent", version="1"),
        harness_version="base",
        task=TaskRef(env="dbbench", split="dev", task_id=task, task_type="other",
                     instruction="How many rows?", seed=i),
        steps=[], outcome=Outcome(success=False, reward=0.0, termination=Termination.FAILURE, steps=0),
        timings=Timings(started_at=now, finished_at=now),
    ).to_json_bytes())
lines.append(b'{"not": "a trajectory"}')
open(sys.argv[1], "wb").write(b"\n".join(lines) + b"\n")
EOF
set +e
$HR "${CFG[@]}" publish "$WORK/run.jsonl" --dry-run > "$WORK/dry.txt" 2>&1
rc=$?
set -e
[ $rc = 1 ] || fail "publish --dry-run of a file with an invalid line exited $rc"
grep -q "run.jsonl:3: warning: task 'task-7' is not in dbbench/dev" "$WORK/dry.txt" \
  || fail "no unreplayable warning: $(cat "$WORK/dry.txt")"
set +e
$HR "${CFG[@]}" publish "$WORK/run.jsonl" --skip-invalid > "$WORK/sent.txt" 2>&1
rc=$?
set -e
[ $rc = 1 ] || fail "publish --skip-invalid exited $rc: $(cat "$WORK/sent.txt")"
grep -q "3 sent" "$WORK/sent.txt" || fail "publish: $(cat "$WORK/sent.txt")"
wait_for 60 "the unreplayable failure counted" sh -c \
  "curl -s http://127.0.0.1:$METRICS_PORT/metrics | grep -q 'harness_r1_unreplayable_failures_total{env=\"dbbench\"} 1.0'"

step "dead letters: deadletter list shows the invalid line sent by hand, the outbox agrees"
$PY - "$WORK/daemon.yaml" <<'EOF'
import sys
from pathlib import Path
from harness_r1.daemon.settings import load_settings
from harness_r1.consumers import make_producer, publish
s = load_settings(Path(sys.argv[1]))
p = make_producer(s.kafka_client())
publish(p, s.trajectory_topic, b"{broken", timeout_s=10)
p.close()
EOF
wait_for 60 "the dead letter" sh -c "$HR ${CFG[*]} deadletter list | grep -q '1 dead letters'"
$HR "${CFG[@]}" deadletter list > "$WORK/dlq.txt"
grep -q "outbox holds 1 for group" "$WORK/dlq.txt" || fail "deadletter list: $(cat "$WORK/dlq.txt")"

step "rollback: overlay add, release, pause (list says paused), resume, rollback --to base"
REF=harness_r1/sandbox/reference_patches/dbbench_lookup.patch
ID=$($HR "${CFG[@]}" overlay add "$REF" --target pool-a | tail -1)
$HR "${CFG[@]}" overlay release "$ID" --reason "won its canary" > /dev/null
$HR overlay pause --target pool-a --reason "INC-1" "${CFG[@]}" > /dev/null  # --config after
$HR "${CFG[@]}" overlay list --target pool-a | tr -s ' \n' ' ' | grep -q "pool pool-a is paused" \
  || fail "overlay list does not say the pool is paused"
$HR "${CFG[@]}" overlay resume --target pool-a > /dev/null
$HR "${CFG[@]}" overlay rollback --target pool-a --to base --reason "INC-42" > /dev/null
wait_for 60 "the daemon to count the operator's rollback" sh -c \
  "curl -s http://127.0.0.1:$METRICS_PORT/metrics | grep -q 'harness_r1_control_commands_followed_total{actor=\"operator\",command=\"rollback\"} 1.0'"

step "ingest reset: harness-r1 ingest reset --partition 0 --to earliest (signed, recorded)"
$HR "${CFG[@]}" ingest reset --partition 0 --to earliest --reason "walk" > "$WORK/reset.txt"
grep -q "published reset_offset" "$WORK/reset.txt" || fail "ingest reset: $(cat "$WORK/reset.txt")"
wait_for 60 "the daemon to apply the reset" grep -q ingest_offset_reset "$WORK/daemon.log"
wait_for 60 "/readyz ready again" sh -c "curl -sf http://127.0.0.1:$METRICS_PORT/readyz | grep -qx ready"

step "stop: SIGTERM drains and exits 0; every line of the JSON log is JSON"
kill -TERM "$DAEMON_PID"
set +e
wait "$DAEMON_PID"
rc=$?
set -e
DAEMON_PID=""
[ $rc = 0 ] || fail "the daemon exited $rc on SIGTERM"
$PY - "$WORK/daemon.log" <<'EOF' || fail "a non-JSON line in the daemon's log"
import json, sys
bad = [line for line in open(sys.argv[1]) if line.strip() and not line.startswith("{")]
for line in bad[:5]:
    print("not JSON:", line.rstrip(), file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
echo "runbook walked: every step as documented"
