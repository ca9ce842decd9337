#!/usr/bin/env bash
# The lab demo: bring up the local Kubernetes lab, roll the naive sample under
# load at its Service and through the ingress side by side (requests drop on
# both paths, the ingress a while longer: rollprobe exits 1), then the
# graceful one at its Service and through the Gateway (nothing drops: exit 0),
# show where the reports are, and take the lab down.
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
# make demo has just built (or found) them: what is still to build says so;
# the cached ones were listed already.
bins=$(lab/tools/build.sh 2> >(grep -v '^lab-bins: .* cached$' >&2))
rp="$PWD/$bin/rollprobe"
# The ingress hears of endpoint changes 2 s late (as a loaded controller
# does): the run measures how much longer it routes to deleted pods.
"$rp" lab up --bins "$bins" --edge-lag 2s
ca=/run/rollprobe-lab/pki/edge-ca.crt
# Traefik's JSON access log (every request's ID kept): where the edge sent
# each failed request, so the pod is named for certain on the edge's path
# too, as conntrack names it on the Service's.
edge_log=/run/rollprobe-lab/logs/traefik-access.log
trap '"$rp" lab down >/dev/null 2>&1 || true; echo "demo: lab taken down"' EXIT

for sample in naive graceful; do
  "$rp" lab apply -f "lab/manifests/$sample.yaml" >/dev/null
done
# kube-proxy programs new Services, and Traefik new routes, a moment after
# they exist: wait until every path answers.
naive_paths=(--target svc=http://naive.default.svc/ --target edge=https://naive.lab.example/)
graceful_paths=(--target svc=http://graceful.default.svc/ --target gateway=https://graceful-gw.lab.example/)
for url in http://naive.default.svc/ https://naive.lab.example/ http://graceful.default.svc/ https://graceful-gw.lab.example/; do
  for _ in $(seq 60); do
    if "$rp" lab exec -- "$rp" probe "$url" --cacert "$ca" --rate 20 --duration 500ms --progress 0 >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
done

# On a terminal each run shows the live dashboard (--ui auto) and leaves it
# when the run ends; in a pipe or CI, plain lines.
codes=()
for sample in naive graceful; do
  paths=naive_paths[@]
  [ "$sample" = graceful ] && paths=graceful_paths[@]
  echo
  echo "demo: === rollprobe run on '$sample' ($(head -1 "lab/manifests/$sample.yaml" | sed 's/^# [a-z-]*: //')), at its Service and through the edge"
  set +e
  "$rp" lab exec -- "$rp" run --deployment "$sample" "${!paths}" --cacert "$ca" --backend-header X-Pod-Name --edge-access-log "$edge_log" \
    --baseline 3s --settle 3s --progress 0 --exit-when-done --report "$out/$sample.json" --html "$out/$sample.html"
  codes+=($?)
  set -e
done
echo
echo "demo: naive exited ${codes[0]} (1: requests dropped on both paths; its finding says how much longer the ingress routed to deleted pods),"
echo "demo: graceful exited ${codes[1]} (0: none dropped on either path)."
echo "demo: reports, with every failed request and the pod/endpoint timeline: $out/naive.json $out/graceful.json"
echo "demo: the same runs as pages to open in a browser (offline, self-contained): $out/naive.html $out/graceful.html"
echo "demo: the same proof for a StatefulSet, a DaemonSet, a node drain or an Argo Rollout: rollprobe run --statefulset NAME, --daemonset NAME, --deployment NAME --drain NODE, or --rollout NAME --promote (the lab's samples: lab/manifests/naive-sts.yaml, daemonset-local.yaml, drain-web.yaml, argo-canary.yaml)."
