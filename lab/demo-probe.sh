#!/usr/bin/env bash
# The probe-only demo (no cluster needed): probe a local demo app while it is
# "redeployed" the naive way — the old process stops on SIGTERM, the new one
# starts a second later. rollprobe counts and classifies every request the
# restart dropped and fails, as a CI gate would (exit 1).
#
# Usage: lab/demo-probe.sh   (from the repository root, after `make build`)
set -euo pipefail
bin=${BIN:-bin}
addr=127.0.0.1:18081
out=${OUT:-$bin/demo}
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

start_app() {
  "$bin/demoapp" --listen "$addr" --name "$1" --shutdown immediate >>"$out/demoapp.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do
    if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "demo: $1 did not start; see $out/demoapp.log" >&2
  return 1
}

echo "demo: starting demo-v1 on $addr"
start_app demo-v1
v1=${pids[-1]}
echo "demo: probing at 500 req/s for 6s (half fresh, half kept-alive connections)"
"$bin/rollprobe" probe "http://$addr/" --rate 500 --duration 6s --conn mixed=0.5 \
  --backend-header X-Pod-Name --report "$out/report.json" --progress 2s &
probe=$!
sleep 2
echo "demo: redeploying: SIGTERM to demo-v1, demo-v2 starts 1s later"
kill -TERM "$v1"
sleep 1
start_app demo-v2
set +e
wait "$probe"
code=$?
set -e
echo
echo "demo: rollprobe exited $code (1 = requests dropped above the budget)."
echo "demo: every dropped request is in $out/report.json with its class, phase and timing."
