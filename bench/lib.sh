# Helpers shared by bench/bench.sh and bench/https.sh (sourced).

# start_nginx WORKDIR SERVER_LINES: one nginx worker answering 200 "ok"
# with keep-alive held open, its server block's listen (and TLS) lines
# given; sets nginx_pid and waits until port $2's first listen answers.
start_nginx() {
  local dir=$1 lines=$2 port
  cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  server {
$lines
    location / { return 200 "ok\n"; }
  }
}
CONF
  nginx -c "$dir/nginx.conf" -p "$dir" &
  nginx_pid=$!
  port=$(awk '/listen/ {split($2, a, ":"); print a[2]; exit}' <<<"$lines")
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"${port%%[^0-9]*}") 2>/dev/null && break; sleep 0.1; done
}

# median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# jsonfield FILE EXPR: EXPR evaluated over the JSON document d.
jsonfield() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$1" "$2"; }

# cpu_us TIMEFILE N: the user+system seconds /usr/bin/time wrote, in µs per
# one of N requests.
cpu_us() { awk -v n="$2" '{printf "%.2f\n", ($1+$2)/n*1e6}' "$1"; }

# bench_setup NAME WORKDIR PACKAGES...: the script's work directory
# (removed at exit, with the nginx it started), its log prefix, the Debian
# packages it needs (installed when missing: COMMAND or COMMAND:PACKAGE),
# and fortio built once into $CACHE/bench-bin ($FORTIO).
bench_setup() {
  bench_name=$1 work=$2
  shift 2
  nginx_pid=
  trap 'if [ -n "$nginx_pid" ]; then kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
  local need=() want cmd pkg
  for want in "$@"; do
    cmd=${want%%:*} pkg=${want#*:}
    command -v "$cmd" >/dev/null || [ -x "$cmd" ] || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  FORTIO=$CACHE/bench-bin/fortio
  if [ ! -x "$FORTIO" ]; then
    log "installing fortio v1.66.5 into $CACHE/bench-bin"
    GOBIN=$CACHE/bench-bin GOFLAGS= go install fortio.org/fortio@v1.66.5
  fi
  [ -x "$RP" ] || { echo "$bench_name: run make build first" >&2; exit 1; }
}

log() { printf '%s: %s\n' "$bench_name" "$*" >&2; }

# counted NAME N OUTPUT: stops the benchmark when NAME made no request (its
# client failed outright): a row divided by that count would read inf, as
# awk divides by zero without a word, and its medians would mean nothing.
# Call it in the script's own shell (not inside $(...)), so exit stops it.
counted() {
  case $2 in
  '' | *[!0-9]* | 0)
    log "$1 made no request (its count: '$2'); the end of its output ($3):"
    tail -n 5 "$3" >&2
    exit 1
    ;;
  esac
}
