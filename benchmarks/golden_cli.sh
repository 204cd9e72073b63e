#!/usr/bin/env bash
# The golden CLI outputs a behaviour-preserving restructure must leave unchanged: `patch check`
# of the reference patches and of a hostile one, `packet build` of fixed trajectories, and
# `config show` of the defaults (the CLI's module: harness_r1.cli.app, before that
# harness_r1.daemon.cli). Compare two commits:
#   bash benchmarks/golden_cli.sh OLD_REV [NEW_REV]     (NEW_REV: the working tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/old" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
"$PY" "$ROOT/benchmarks/golden_trajectories.py" "$WORK/trajs.jsonl"
cat > "$WORK/hostile.json" <<'J'
{"env": "dbbench", "hooks": [{"hook": "pre_action", "code": "import os\ndef hook(ctx, state):\n    return None\n"}]}
J
outputs() {  # CHECKOUT OUTDIR
  mkdir -p "$2"
  cli() { (cd "$1" && env -u HARNESS_R1_CONFIG "$PY" -c 'import os, sys; main = __import__("harness_r1.cli.app" if os.path.isfile("harness_r1/cli/app.py") else "harness_r1.daemon.cli", fromlist=["main"]).main; sys.argv[0] = "harness-r1"; main()' "${@:2}"); }
  for p in "$ROOT"/harness_r1/sandbox/reference_patches/*.patch "$WORK/hostile.json"; do
    cli "$1" patch check "$p" > "$2/check-$(basename "$p").out" 2>&1 || echo "rc=$?" >> "$2/check-$(basename "$p").out"
  done
  cli "$1" packet build "$WORK/trajs.jsonl" > "$2/packets.out" 2>&1
  cli "$1" config show > "$2/config.out" 2>&1
}
git -C "$ROOT" worktree add -q "$WORK/old" "$1"
outputs "$WORK/old" "$WORK/out-old"
if [ $# -ge 2 ]; then
  git -C "$ROOT" worktree add -q "$WORK/new" "$2"; outputs "$WORK/new" "$WORK/out-new"
  git -C "$ROOT" worktree remove --force "$WORK/new"
else
  outputs "$ROOT" "$WORK/out-new"
fi
diff -r "$WORK/out-old" "$WORK/out-new" && echo "golden outputs identical: $1 vs ${2:-working tree}"
