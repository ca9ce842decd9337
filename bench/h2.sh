#!/usr/bin/env bash
# HTTP/2 and gRPC side by side with the reference tools, written to
# bench/RESULTS-h2.md: h2load (Debian's nghttp2-client) on a local nginx
# serving h2c (prior knowledge; one worker), at equal connections and
# streams; ghz (built once into the cache) on grpc-go's own health server
# (bench/grpcserver, one P), at equal concurrency and connections.
#
# Usage: make bench-h2      (REPS=5 DURATION=10s by default)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
DUR=${DURATION:-10}
RATE=${RATE:-5000}
# Connections at 100 req/s each: one request a write for h2load.
if [ "$RATE" -lt 100 ] || [ $((RATE % 100)) != 0 ]; then
  echo "bench-h2: RATE=$RATE: give a multiple of 100 (the one-request-a-write rows run 100 req/s a connection)" >&2
  exit 2
fi
SINGLES=$((RATE / 100))
CACHE=${ROLLPROBE_CACHE:-$HOME/.cache/rollprobe}
RP=bin/rollprobe
PORT=18096
H2=http://127.0.0.1:$((PORT + 1))/
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_setup bench-h2 "$(mktemp -d /tmp/rollprobe-bench-h2.XXXXXX)" h2load:nghttp2-client nginx:nginx-light /usr/bin/time:time python3
GHZ=$CACHE/bench-bin/ghz
if [ ! -x "$GHZ" ]; then
  log "installing ghz v0.120.0 into $CACHE/bench-bin"
  GOBIN=$CACHE/bench-bin GOFLAGS= go install github.com/bojand/ghz/cmd/ghz@v0.120.0
fi
go build -o "$work/grpcserver" ./bench/grpcserver
GOMAXPROCS=1 "$work/grpcserver" --listen 127.0.0.1:$PORT &
grpc_pid=$!
trap 'kill "$grpc_pid" 2>/dev/null || true; if [ -n "$nginx_pid" ]; then kill "$nginx_pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
start_nginx "$work" "    listen 127.0.0.1:$((PORT + 1)) http2 backlog=8192;"
# The servers' own CPU around each run: flat out a server is saturated
# under either client, so the rate is the inverse of what it spends on a
# request, and that depends on how the client sends (RESULTS-h2.md,
# 2026-11-28): the servers' CPU a request says whether a lower rate is
# the client's own speed or the server's work. nginx's one worker is its
# master's child; grpcserver is one process.
ngx_worker=
for _ in $(seq 50); do ngx_worker=$(pgrep -P "$nginx_pid" | head -1) && break; sleep 0.1; done
[ -n "$ngx_worker" ] || { echo "bench-h2: no nginx worker under $nginx_pid" >&2; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user+system, in clock ticks
server_of() { case $1 in "$H2") echo "$ngx_worker" ;; *) echo "$grpc_pid" ;; esac; }
server_us() { # name pid ticks-before requests: the server's CPU µs per request
  echo "$1-server $(awk -v a="$3" -v b="$(ticks "$2")" -v n="$4" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f\n", (b-a)/hz/n*1e6}')" >>"$work/res"
}

rp() { # name, then rollprobe's arguments: achieved rate, CPU µs per request, the server's
  local name=$1; shift
  local server t0; server=$(server_of "$1"); t0=$(ticks "$server")
  /usr/bin/time -f "%U %S" -o "$work/t" "$RP" probe "$@" --duration "${DUR}s" --progress 0 --ui none -o json >"$work/rp.json" || true
  local sent; sent=$(jsonfield "$work/rp.json" "d['totals']['sent']"); counted "$name" "$sent" "$work/rp.json"
  server_us "$name" "$server" "$t0" "$sent"
  echo "$name $(jsonfield "$work/rp.json" "d['prober']['achieved_rate']")" >>"$work/res"
  echo "$name-cpu $(cpu_us "$work/t" "$sent")" >>"$work/res"
  echo "$name-failed $(jsonfield "$work/rp.json" "d['totals']['failed']")" >>"$work/res"
}
h2l() { # name, then h2load's arguments: rate, CPU µs per request, nginx's
  local name=$1; shift
  local t0; t0=$(ticks "$ngx_worker")
  /usr/bin/time -f "%U %S" -o "$work/t" h2load "$@" -D "$DUR" "$H2" >"$work/h.out" 2>&1
  local done; done=$(awk '/^requests:/ {print $8}' "$work/h.out"); counted "$name" "$done" "$work/h.out"
  server_us "$name" "$ngx_worker" "$t0" "$done"
  echo "$name $(awk '/finished in/ {print $4}' "$work/h.out")" >>"$work/res"
  echo "$name-cpu $(cpu_us "$work/t" "$done")" >>"$work/res"
}
ghz() { # name, then ghz's arguments: rate, grpcserver's CPU µs per call
  local name=$1; shift
  local t0; t0=$(ticks "$grpc_pid")
  "$GHZ" --insecure --call grpc.health.v1.Health/Check -z "${DUR}s" "$@" -O json 127.0.0.1:$PORT >"$work/g.json" 2>/dev/null || true
  local calls; calls=$(jsonfield "$work/g.json" "d['count']"); counted "$name" "$calls" "$work/g.json"
  server_us "$name" "$grpc_pid" "$t0" "$calls"
  echo "$name $(jsonfield "$work/g.json" "round(d['rps'], 1)")" >>"$work/res"
}

: >"$work/res"
for i in $(seq "$REPS"); do
  log "rep $i of $REPS"
  # Alternate which goes first, so a drift of the shared machine cancels.
  if [ $((i % 2)) = 1 ]; then
    h2l h2load-max -c 10 -m 10
    GOMAXPROCS=1 rp rp-max "$H2" --protocol h2 --rate 0 --concurrency 100 --connections 10 --streams 10
  else
    GOMAXPROCS=1 rp rp-max "$H2" --protocol h2 --rate 0 --concurrency 100 --connections 10 --streams 10
    h2l h2load-max -c 10 -m 10
  fi
  # The same probes on the goroutine engine (https, names and --conn new
  # use it): what the event loops changed, in the same run.
  GOMAXPROCS=1 rp rp-max-g "$H2" --protocol h2 --rate 0 --concurrency 100 --connections 10 --streams 10 --engine goroutines
  h2l h2load-rate -c 10 -m 10 --rps $((RATE / 10))
  rp rp-rate "$H2" --protocol h2 --rate "$RATE" --connections 10 --streams 10
  rp rp-rate-g "$H2" --protocol h2 --rate "$RATE" --connections 10 --streams 10 --engine goroutines
  # The same rate where h2load writes each request on its own, as
  # rollprobe does: its --rps timer ticks every max(10 ms, 1/rps), so at
  # 100 req/s a connection it sends one request a tick (above, 500 a
  # connection, it sends five a write).
  h2l h2load-rate1 -c "$SINGLES" -m 2 --rps 100
  rp rp-rate1 "$H2" --protocol h2 --rate "$RATE" --connections "$SINGLES" --streams 2
  rp rp-rate1-g "$H2" --protocol h2 --rate "$RATE" --connections "$SINGLES" --streams 2 --engine goroutines
  ghz ghz -c 50 --connections 10
  GOMAXPROCS=1 rp rp-grpc "http://127.0.0.1:$PORT" --protocol grpc --rate 0 --concurrency 50 --connections 10
  GOMAXPROCS=1 rp rp-grpc-g "http://127.0.0.1:$PORT" --protocol grpc --rate 0 --concurrency 50 --connections 10 --engine goroutines
done

m() { awk -v k="$1" '$1==k {print $2}' "$work/res" | median; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }
paired() { # per-repetition ratios of $1 to $2: median (min–max)
  paste <(awk -v k="$1" '$1==k {print $2}' "$work/res") <(awk -v k="$2" '$1==k {print $2}' "$work/res") |
    awk '{print $1/$2}' | sort -g | awk '{a[NR]=$1} END {m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.3f (%.3f–%.3f)", m, a[1], a[NR]}'
}
failed=$(awk '$1 ~ /-failed$/ {s += $2} END {print s+0}' "$work/res")
cat >bench/RESULTS-h2.md <<MD
# HTTP/2 and gRPC (bench/h2.sh)

Measured $(date -u +%Y-%m-%d) on this machine ($(nproc) cores, $(uname -r), $(go version | awk '{print $3}')), medians of
$REPS runs of ${DUR}s. h2c: Debian nginx-light $(nginx -v 2>&1 | awk -F/ '{print $2}') (one worker, \`return 200\`, HTTP/2 with prior
knowledge) and h2load $(h2load --version | awk '{print $2}'); gRPC: grpc-go's health server (bench/grpcserver, one P) and
ghz v0.120.0. Everything on loopback, sharing the 2 cores. Reproduce: \`make build && make bench-h2\`.
Failed requests over every rollprobe run: $failed. rollprobe sends each request as one stream on
connections it owns and classifies every one; neither h2load nor ghz is asked to do more than count.

| measure | reference | rollprobe | rollprobe ÷ reference (per repetition: median, range) |
|---|---|---|---|
| h2c, most req/s, 10 connections × 10 streams (h2load \`-c 10 -m 10\`; rollprobe \`--rate 0 --concurrency 100 --connections 10 --streams 10\`, GOMAXPROCS=1) | $(m h2load-max) | $(m rp-max) | **$(paired rp-max h2load-max)** |
| CPU µs per request at the most (user+sys) | $(m h2load-max-cpu) | $(m rp-max-cpu) | $(paired rp-max-cpu h2load-max-cpu) |
| CPU µs per request at a fixed $RATE req/s (h2load \`-c 10 -m 10 --rps $((RATE / 10))\` per connection; rollprobe \`--connections 10 --streams 10\`) | $(m h2load-rate-cpu) | $(m rp-rate-cpu) | **$(paired rp-rate-cpu h2load-rate-cpu)** |
| CPU µs per request at a fixed $RATE req/s, one request a write (h2load \`-c $SINGLES -m 2 --rps 100\` per connection; rollprobe \`--connections $SINGLES --streams 2\`) | $(m h2load-rate1-cpu) | $(m rp-rate1-cpu) | **$(paired rp-rate1-cpu h2load-rate1-cpu)** |
| nginx's CPU µs per request, flat out (as above: under h2load; under rollprobe) | $(m h2load-max-server) | $(m rp-max-server) | $(paired rp-max-server h2load-max-server) |
| gRPC health checks per second, 50 in flight on 10 connections (ghz \`-c 50 --connections 10\`; rollprobe \`--protocol grpc --rate 0 --concurrency 50 --connections 10\`, GOMAXPROCS=1) | $(m ghz) | $(m rp-grpc) | **$(paired rp-grpc ghz)** |
| grpcserver's CPU µs per call at the most (as above: under ghz; under rollprobe) | $(m ghz-server) | $(m rp-grpc-server) | $(paired rp-grpc-server ghz-server) |
| *goroutines*: h2c, most req/s (as above, \`--engine goroutines\`) | $(m h2load-max) | $(m rp-max-g) | $(paired rp-max-g h2load-max) |
| *goroutines*: nginx's CPU µs per request, flat out | $(m h2load-max-server) | $(m rp-max-g-server) | $(paired rp-max-g-server h2load-max-server) |
| *goroutines*: CPU µs per request at the most | $(m h2load-max-cpu) | $(m rp-max-g-cpu) | $(paired rp-max-g-cpu h2load-max-cpu) |
| *goroutines*: CPU µs per request at a fixed $RATE req/s | $(m h2load-rate-cpu) | $(m rp-rate-g-cpu) | $(paired rp-rate-g-cpu h2load-rate-cpu) |
| *goroutines*: CPU µs per request at a fixed $RATE req/s, one request a write | $(m h2load-rate1-cpu) | $(m rp-rate1-g-cpu) | $(paired rp-rate1-g-cpu h2load-rate1-cpu) |
| *goroutines*: gRPC health checks per second | $(m ghz) | $(m rp-grpc-g) | $(paired rp-grpc-g ghz) |

rollprobe's rows run on the event loops (the automatic choice for h2c and gRPC to an IP on Linux);
the rows marked *goroutines* run the same probes on the goroutine engine in the same repetitions.

The goals (issue #26): at least 0.9× h2load's requests per second and no more than 1.1× its CPU
per request; at least 2× ghz's rate at equal concurrency. Where they stand, and why, is written
below this table by hand after each run (the script leaves it out).
MD
log "wrote bench/RESULTS-h2.md"
