#!/usr/bin/env bash
# Measures what the lab's default TLSStore saves Traefik: without a
# default certificate Traefik generates a new RSA key pair each time its
# dynamic configuration changes (pkg/tls/tlsmanager.go,
# getDefaultCertificate), and every EndpointSlice change of a rollout
# changes it. On the lab (brought up if it is not), the naive sample is
# scaled 4 -> 3 replicas N times, 4 s apart (Traefik's provider throttle
# is 2 s), with the TLSStore "default" (the lab's edge certificate as
# the default one) and without it (deleted, then put back), twice; it
# prints the Traefik process's CPU (utime+stime) over each. Needs root
# and make build's bin/; leaves the lab up (rollprobe lab down ends it).
#   usage: lab/tools/traefik-default-cert.sh [scalings per measure, default 8]
set -euo pipefail
n=${1:-8}
rp=${BIN:-bin}/rollprobe
sd=/run/rollprobe-lab
if [ "$(id -u)" -ne 0 ]; then echo "traefik-default-cert: needs root (the lab)" >&2; exit 2; fi
k() { "$rp" lab exec -- kubectl "$@"; }
cpu() { awk '{print $14+$15}' "/proc/$(cut -d' ' -f1 "$sd/pids/traefik.pid")/stat"; }
store() {
  k apply -f - >/dev/null <<Y
apiVersion: traefik.io/v1alpha1
kind: TLSStore
metadata: {name: default, namespace: default}
spec:
  defaultCertificate: {secretName: lab-edge-tls}
Y
}
scalings() {
  local before after
  before=$(cpu)
  for _ in $(seq "$n"); do
    k scale deploy naive --replicas=4 >/dev/null; sleep 4
    k scale deploy naive --replicas=3 >/dev/null; sleep 4
  done
  after=$(cpu)
  echo $((after - before))
}
"$rp" lab up >/dev/null
"$rp" lab apply -f lab/manifests/naive.yaml >/dev/null
k rollout status deploy naive --timeout=120s >/dev/null
store
sleep 5
hz=$(getconf CLK_TCK)
for round in 1 2; do
  with=$(scalings)
  k delete tlsstore default >/dev/null
  sleep 5
  without=$(scalings)
  store
  sleep 5
  echo "round $round: Traefik's CPU over $((2 * n)) endpoint changes: $with ticks with the default certificate, $without without (${hz} ticks a second)"
done
