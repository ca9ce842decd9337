#!/usr/bin/env bash
# The lab demo: bring up the local Kubernetes lab, roll the naive sample under
# load (requests drop: rollprobe exits 1), then the graceful one (nothing
# drops: exit 0), show where the reports are, and take the lab down.
# Needs root (network namespaces). Run from the repository root: make demo.
set -euo pipefail
bin=${BIN:-bin}
out=$bin/demo
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: the lab needs root (namespaces, cgroups, nftables): run 'make demo', which uses sudo when not root." >&2
  echo "demo: without root, 'make demo-probe' shows the prober on a local process instead." >&2
  exit 2
fi
mkdir -p "$out"
bins=$(lab/tools/build.sh)
rp="$PWD/$bin/rollprobe"
"$rp" lab up --bins "$bins"
trap '"$rp" lab down >/dev/null 2>&1 || true; echo "demo: lab taken down"' EXIT

for sample in naive graceful; do
  "$rp" lab apply -f "lab/manifests/$sample.yaml" >/dev/null
done
# kube-proxy programs new Services a moment after they exist: wait until both answer.
for sample in naive graceful; do
  for _ in $(seq 60); do
    ip=$("$rp" lab svc-ip "$sample")
    if "$rp" lab exec -- "$rp" probe "http://$ip/" --rate 20 --duration 500ms --progress 0 >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
done

# On a terminal each run shows the live dashboard (--ui auto) and leaves it
# when the run ends; in a pipe or CI, plain lines.
codes=()
for sample in naive graceful; do
  ip=$("$rp" lab svc-ip "$sample")
  echo
  echo "demo: === rollprobe run on '$sample' ($(head -1 "lab/manifests/$sample.yaml" | sed 's/^# [a-z-]*: //'))"
  set +e
  "$rp" lab exec -- "$rp" run --deployment "$sample" --target "http://$ip/" --backend-header X-Pod-Name \
    --baseline 3s --settle 3s --progress 0 --exit-when-done --report "$out/$sample.json" --html "$out/$sample.html"
  codes+=($?)
  set -e
done
echo
echo "demo: naive exited ${codes[0]} (1: requests dropped), graceful exited ${codes[1]} (0: none dropped)."
echo "demo: reports, with every failed request and the pod/endpoint timeline: $out/naive.json $out/graceful.json"
echo "demo: the same runs as pages to open in a browser (offline, self-contained): $out/naive.html $out/graceful.html"
