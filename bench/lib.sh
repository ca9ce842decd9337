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
