#!/usr/bin/env bash
# What https costs rollprobe, side by side with wrk and fortio on a local
# nginx serving the same 200 over http and https (one worker, loopback),
# written to bench/RESULTS-https.md. https runs on the goroutine engine (Go's
# crypto/tls drives a blocking net.Conn; the event loops speak plain TCP),
# so this measures that engine's price against the loops and against the
# reference tools on the same https.
#
# Usage: make bench-https      (REPS=5 DURATION=10s by default)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
DUR=${DURATION:-10}
RATE=${RATE:-5000}
CACHE=${ROLLPROBE_CACHE:-$HOME/.cache/rollprobe}
RP=bin/rollprobe
PORT=18094
HTTP=http://127.0.0.1:$PORT/
HTTPS=https://127.0.0.1:$((PORT + 1))/
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_setup bench-https "$(mktemp -d /tmp/rollprobe-bench-https.XXXXXX)" wrk nginx:nginx-light openssl /usr/bin/time:time python3

# A CA and a server certificate for 127.0.0.1 (ECDSA P-256, as most
# ingresses serve): every client verifies against the CA.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench-ca \
  -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
  -keyout "$work/srv.key" -out "$work/srv.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$work/ext"
openssl x509 -req -in "$work/srv.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial -days 1 \
  -extfile "$work/ext" -out "$work/srv.crt" 2>/dev/null

start_nginx "$work" "    listen 127.0.0.1:$((PORT + 1)) ssl backlog=8192;
    listen 127.0.0.1:$PORT backlog=8192;
    ssl_certificate $work/srv.crt;
    ssl_certificate_key $work/srv.key;"

rp_cpu() { # name, then rollprobe's arguments: CPU µs per request
  local name=$1; shift
  /usr/bin/time -f "%U %S" -o "$work/t" "$RP" probe "$@" --duration "${DUR}s" --progress 0 --ui none -o json >"$work/rp.json" || true
  local n; n=$(jsonfield "$work/rp.json" "d['totals']['sent']"); counted "$name" "$n" "$work/rp.json"
  echo "$name $(cpu_us "$work/t" "$n")" >>"$work/res"
  echo "$name-failed $(jsonfield "$work/rp.json" "d['totals']['failed']")" >>"$work/res"
}
fortio_cpu() { # name, then fortio's arguments
  local name=$1; shift
  /usr/bin/time -f "%U %S" -o "$work/t" "$FORTIO" load -loglevel Error -t "${DUR}s" "$@" >"$work/f.out" 2>&1
  local n; n=$(awk '/All done/ {print $3}' "$work/f.out"); counted "$name" "$n" "$work/f.out"
  echo "$name $(cpu_us "$work/t" "$n")" >>"$work/res"
}

: >"$work/res"
for i in $(seq "$REPS"); do
  log "rep $i of $REPS"
  # CPU per request at a fixed rate on 32 kept-alive connections.
  rp_cpu rp-http-loops "$HTTP" --rate "$RATE" --conn keepalive --engine loops
  rp_cpu rp-http-goroutines "$HTTP" --rate "$RATE" --conn keepalive --engine goroutines
  rp_cpu rp-https "$HTTPS" --rate "$RATE" --conn keepalive --cacert "$work/ca.crt"
  fortio_cpu fortio-https -qps "$RATE" -c 32 -cacert "$work/ca.crt" "$HTTPS"
  fortio_cpu fortio-http -qps "$RATE" -c 32 "$HTTP"
  # A new connection (and a full handshake) per request, 500 a second.
  rp_cpu rp-https-new "$HTTPS" --rate 500 --conn new --cacert "$work/ca.crt"
  fortio_cpu fortio-https-new -qps 500 -c 32 -keepalive=false -cacert "$work/ca.crt" "$HTTPS"
  # Maximum kept-alive throughput, 32 connections, one P / one thread.
  GOMAXPROCS=1 "$RP" probe "$HTTPS" --rate 0 --concurrency 32 --cacert "$work/ca.crt" --duration "${DUR}s" --progress 0 --ui none -o json >"$work/rp.json" || true
  echo "tp-rp-https $(jsonfield "$work/rp.json" "d['prober']['achieved_rate']")" >>"$work/res"
  echo "tp-wrk-https $(wrk -t1 -c32 -d"${DUR}s" "$HTTPS" | awk '/Requests\/sec/ {print $2}')" >>"$work/res"
done

m() { awk -v k="$1" '$1==k {print $2}' "$work/res" | median; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
failed=$(awk '$1 ~ /-failed$/ {s += $2} END {print s+0}' "$work/res")
cat >bench/RESULTS-https.md <<MD
# What https costs (bench/https.sh)

Measured $(date -u +%Y-%m-%d) on this machine ($(nproc) cores, $(uname -r), $(go version | awk '{print $3}')), medians of
$REPS runs of ${DUR}s, against Debian nginx-light $(nginx -v 2>&1 | awk -F/ '{print $2}') (one worker, \`return 200\`, TLS 1.3 with an
ECDSA P-256 certificate, on loopback, sharing the cores). Reproduce: \`make build && make bench-https\`.
Failed requests over every rollprobe run: $failed. fortio and rollprobe verify the server's
certificate against the CA; wrk cannot be told to (it does not verify). Ratios are of the medians.

https runs on the goroutine engine: Go's crypto/tls drives a blocking \`net.Conn\`, and the
event loops speak plain TCP on non-blocking sockets; an event-loop TLS would mean a TLS state
machine of rollprobe's own, which it does not carry.

| CPU per request (µs, client side) | rollprobe | fortio | rollprobe ÷ fortio |
|---|---|---|---|
| http, kept alive, $RATE req/s (rollprobe's event loops) | $(m rp-http-loops) | $(m fortio-http) | $(ratio "$(m rp-http-loops)" "$(m fortio-http)") |
| http, kept alive, $RATE req/s (rollprobe's goroutines) | $(m rp-http-goroutines) | $(m fortio-http) | $(ratio "$(m rp-http-goroutines)" "$(m fortio-http)") |
| https, kept alive, $RATE req/s | $(m rp-https) | $(m fortio-https) | $(ratio "$(m rp-https)" "$(m fortio-https)") |
| https, a new connection per request, 500 req/s | $(m rp-https-new) | $(m fortio-https-new) | $(ratio "$(m rp-https-new)" "$(m fortio-https-new)") |

What https costs rollprobe: kept alive, $(ratio "$(m rp-https)" "$(m rp-http-loops)") × the CPU of plain http on the event loops
and $(ratio "$(m rp-https)" "$(m rp-http-goroutines)") × plain http on the same goroutine engine.

| maximum kept-alive throughput, 32 connections, one P / one thread | req/s |
|---|---|
| rollprobe, https | $(m tp-rp-https) |
| wrk -t1, https | $(m tp-wrk-https) |
| rollprobe ÷ wrk | $(ratio "$(m tp-rp-https)" "$(m tp-wrk-https)") |
MD
log "wrote bench/RESULTS-https.md"
cat bench/RESULTS-https.md
