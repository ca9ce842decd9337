#!/usr/bin/env bash
# Reproduces, outside any cluster, how a ClusterIP refuses a connection
# while kube-proxy (nftables mode, v1.36) holds endpoints for it: each sync
# of a Service's endpoints replaces the Service's DNAT rule, whose pod
# addresses are an anonymous map picked by "numgen random mod N"; a SYN
# evaluated across that update can miss the map, is not rewritten, and meets
# kube-proxy's reject of ClusterIPs (connection refused, no conntrack entry).
# docs/findings/proxy-rules-without-endpoint.md gives the figures.
#
# In a scratch network namespace: three demo app servers, kube-proxy's chain
# layout for one Service (service-ips verdict map, a service chain with the
# numgen map, the cluster-ips reject), and rollprobe probing the Service
# address with a new connection a request, flat out, while the service
# chain is rewritten as fast as nft runs. Then the same with a rule without
# a map (the control). Needs root, nft, and make build's bin/.
#   usage: lab/tools/nft-map-race.sh [seconds per run, default 30]
set -euo pipefail
secs=${1:-30}
bin=${BIN:-bin}
ns=rollprobe-nft-race
vip=10.96.0.1
addr=10.96.0.100
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ "$(id -u)" -ne 0 ]; then echo "nft-map-race: needs root (a network namespace)" >&2; exit 2; fi

ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add v0 type veth peer name v1
ip -n "$ns" addr add "$addr/16" dev v0
ip -n "$ns" link set v0 up
ip -n "$ns" link set v1 up
map="{ 0 : $addr . 8081, 1 : $addr . 8082, 2 : $addr . 8083 }"
ip netns exec "$ns" nft -f - <<EOF
table ip kp {
  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }
  set cluster-ips { type ipv4_addr; }
  chain svc { meta l4proto tcp dnat ip addr . port to numgen random mod 3 map $map; }
  chain services { ip daddr . meta l4proto . th dport vmap @service-ips; }
  chain nat-output { type nat hook output priority -100; policy accept; jump services; }
  chain cluster-ips-check { ip daddr @cluster-ips reject; }
  chain filter-output { type filter hook output priority 0; policy accept; ct state new jump cluster-ips-check; }
}
add element ip kp service-ips { $vip . tcp . 80 : goto svc }
add element ip kp cluster-ips { $vip }
EOF
printf 'flush chain ip kp svc\nadd rule ip kp svc meta l4proto tcp dnat ip addr . port to numgen random mod 3 map %s\n' "$map" > "$work/map.nft"
printf 'flush chain ip kp svc\nadd rule ip kp svc meta l4proto tcp dnat ip to %s:8081\n' "$addr" > "$work/nomap.nft"
for port in 8081 8082 8083; do
  ip netns exec "$ns" "$bin/demoapp" -listen "$addr:$port" -name "p$port" >/dev/null 2>&1 &
  pids+=($!)
done
for _ in $(seq 50); do
  if ip netns exec "$ns" "$bin/rollprobe" probe "http://$vip/" --rate 20 --duration 200ms --progress 0 >/dev/null 2>&1; then break; fi
  sleep 0.1
done

for rule in map nomap; do
  ip netns exec "$ns" bash -c "end=\$((SECONDS+$secs)); n=0; while [ \$SECONDS -lt \$end ]; do nft -f $work/$rule.nft; n=\$((n+1)); done; echo \$n" > "$work/$rule.count" &
  rewriter=$!
  pids+=("$rewriter")
  ip netns exec "$ns" "$bin/rollprobe" probe "http://$vip/" --conn new --rate 0 --concurrency 16 --duration "${secs}s" \
    --progress 0 > "$work/$rule.out" 2>&1 || true
  wait "$rewriter"
  # "requests  sent N  ok N  failed N (...)", and "failures  refused N ..." when any failed
  read -r sent failed < <(awk '$1 == "requests" { print $3, $7 }' "$work/$rule.out") || {
    echo "nft-map-race: the probe printed no totals:" >&2; cat "$work/$rule.out" >&2; exit 1; }
  refused=$(awk '$1 == "failures" { for (i = 2; i < NF; i++) if ($i == "refused") print $(i + 1) }' "$work/$rule.out")
  echo "rule with ${rule/nomap/no map}: $(cat "$work/$rule.count") rewrites, $sent requests, $failed failed (refused ${refused:-0})"
done
