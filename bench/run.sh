#!/usr/bin/env bash
# bench/run.sh: ebb against nginx and HAProxy as HTTP/1.1 reverse proxies.
#
# One run measures three variants (64-byte body at 64 connections, 64 KiB
# body at 64 connections, one-connection latency) for three proxies, with
# the rounds interleaved so that drift in the machine hits every proxy
# alike. See bench/README.md for what the figures mean.
#
# Layout (2 CPUs):
#   CPU 0: the proxy under test (ebb, nginx or HAProxy; all three run, only
#          the one being measured gets traffic)
#   CPU 1: the origin (nginx) and the load generator (wrk)
#
# Knobs (environment):
#   DURATION=10   seconds per measured wrk run
#   ROUNDS=5      measured runs per proxy and variant (the median is kept)
#   WARMUP=2      seconds of unmeasured load per proxy before each variant
#   CONNS=64      connections for the throughput variants
#   PROXIES="ebb nginx haproxy fasthttp"   proxies to measure (any subset);
#                 fasthttp is bench/fasthttp-bare, the barest fasthttp proxy
#   ORIGIN_PORT=18000 EBB_PORT=18080 NGINX_PORT=18081 HAPROXY_PORT=18082
#   FASTHTTP_PORT=18083
#   KEEP_WORK=1   keep the temporary directory (configs, logs, raw wrk output)
set -euo pipefail

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-5}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-64}
PROXIES=${PROXIES:-"ebb nginx haproxy fasthttp"}
ORIGIN_PORT=${ORIGIN_PORT:-18000}
EBB_PORT=${EBB_PORT:-18080}
NGINX_PORT=${NGINX_PORT:-18081}
HAPROXY_PORT=${HAPROXY_PORT:-18082}
FASTHTTP_PORT=${FASTHTTP_PORT:-18083}
KEEP_WORK=${KEEP_WORK:-0}

PROXY_CPU=0
LOAD_CPU=1
SMALL_BYTES=64
LARGE_BYTES=65536

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# ---------------------------------------------------------------------------
# Preconditions
# ---------------------------------------------------------------------------

for tool in go nginx haproxy wrk curl taskset getconf pgrep; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[[ $(nproc --all) -ge 2 ]] || die "needs at least 2 CPUs (proxy on CPU $PROXY_CPU, load on CPU $LOAD_CPU)"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer"
for p in $PROXIES; do
	case $p in ebb | nginx | haproxy | fasthttp) ;; *) die "unknown proxy '$p' in PROXIES" ;; esac
done

CLK_TCK=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/ebb-bench.XXXXXX)
chmod 755 "$WORK" # nginx workers (user nobody) must read the origin's files

# ---------------------------------------------------------------------------
# Process management: every process started here is recorded by PID and
# stopped by PID on exit, however the script ends.
# ---------------------------------------------------------------------------

declare -A PID=() # name -> PID of the process we started

# alive PID: the process exists and is not a zombie.
alive() {
	local stat
	{ read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

# stop_pid NAME: SIGTERM, a bounded wait, then SIGKILL. For nginx the
# workers are killed too if the master did not take them down.
stop_pid() {
	local name=$1 pid=${PID[$1]:-}
	[[ -n $pid ]] || return 0
	local kids
	kids=$(pgrep -P "$pid" || true)
	kill -TERM "$pid" 2>/dev/null || true
	local i
	for ((i = 0; i < 100; i++)); do # up to 10 s (ebb drains for ~2 s)
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "$name (pid $pid) did not stop on SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		# A master killed this way leaves its workers behind.
		local k
		for k in $kids; do kill -KILL "$k" 2>/dev/null || true; done
	fi
	wait "$pid" 2>/dev/null || true
	unset "PID[$name]"
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	local name
	for name in "${!PID[@]}"; do stop_pid "$name"; done
	if [[ $KEEP_WORK == 1 || $rc -ne 0 ]]; then
		log "work directory kept: $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# port_free PORT: true if nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_port NAME PORT LOGFILE: wait (bounded, 10 s) until PORT accepts
# connections; fail at once if the process died.
wait_port() {
	local name=$1 port=$2 logfile=$3 i
	for ((i = 0; i < 100; i++)); do
		if ! alive "${PID[$name]}"; then
			tail -n 30 "$logfile" >&2 || true
			die "$name exited during start-up (log above: $logfile)"
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	tail -n 30 "$logfile" >&2 || true
	die "$name: port $port not ready after 10 s"
}

# check_body NAME PORT PATH BYTES: the URL must answer 200 with BYTES bytes.
check_body() {
	local name=$1 port=$2 path=$3 want=$4 got
	got=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code} %{size_download}' \
		"http://127.0.0.1:$port$path") || die "$name: curl http://127.0.0.1:$port$path failed"
	[[ $got == "200 $want" ]] ||
		die "$name: GET $path answered '$got' (status, bytes); want '200 $want'"
}

# ---------------------------------------------------------------------------
# Build ebb
# ---------------------------------------------------------------------------

log "building ebb from $REPO_DIR"
(cd "$REPO_DIR" && go build -o "$WORK/bin/ebb" ./cmd/ebb) || die "go build ./cmd/ebb failed"
(cd "$REPO_DIR" && go build -o "$WORK/bin/fasthttp-bare" ./bench/fasthttp-bare) || die "go build ./bench/fasthttp-bare failed"
EBB_COMMIT=$(cd "$REPO_DIR" && git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
EBB_DIRTY=$(cd "$REPO_DIR" && [[ -n $(git status --porcelain 2>/dev/null) ]] && echo " (working tree modified)" || true)

for port in "$ORIGIN_PORT" "$EBB_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$FASTHTTP_PORT"; do
	port_free "$port" || die "port $port on 127.0.0.1 is already in use"
done

# ---------------------------------------------------------------------------
# Origin: nginx on CPU 1, 64-byte body on /, 64 KiB static file on /64k.
# ---------------------------------------------------------------------------

SMALL_BODY=$(printf '%*s' "$SMALL_BYTES" '' | tr ' ' 'x')
mkdir -p "$WORK/origin/html" "$WORK/origin/tmp"
head -c "$LARGE_BYTES" /dev/zero | tr '\0' 'y' >"$WORK/origin/html/64k"

cat >"$WORK/origin/nginx.conf" <<EOF
# Origin: one worker, keep-alive without a request cap, no access log.
worker_processes 1;
daemon off;
pid $WORK/origin/nginx.pid;
error_log $WORK/origin/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_timeout 120s;
    keepalive_requests 1000000;   # never close the proxies' pooled connections
    sendfile on;
    client_body_temp_path $WORK/origin/tmp/body;
    proxy_temp_path       $WORK/origin/tmp/proxy;
    fastcgi_temp_path     $WORK/origin/tmp/fastcgi;
    uwsgi_temp_path       $WORK/origin/tmp/uwsgi;
    scgi_temp_path        $WORK/origin/tmp/scgi;
    server {
        listen 127.0.0.1:$ORIGIN_PORT;
        default_type application/octet-stream;
        location = /    { return 200 "$SMALL_BODY"; }
        location = /64k { root $WORK/origin/html; }
    }
}
EOF

start_origin() {
	log "starting origin nginx on 127.0.0.1:$ORIGIN_PORT (CPU $LOAD_CPU)"
	taskset -c "$LOAD_CPU" nginx -p "$WORK/origin" -e "$WORK/origin/error.log" \
		-c "$WORK/origin/nginx.conf" >"$WORK/origin/stdout.log" 2>&1 &
	PID[origin]=$!
	wait_port origin "$ORIGIN_PORT" "$WORK/origin/error.log"
	check_body origin "$ORIGIN_PORT" / "$SMALL_BYTES"
	check_body origin "$ORIGIN_PORT" /64k "$LARGE_BYTES"
}

# ---------------------------------------------------------------------------
# Proxies, all on CPU 0, all with keep-alive to the origin, no logging.
# ---------------------------------------------------------------------------

declare -A PORT=([ebb]=$EBB_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT [fasthttp]=$FASTHTTP_PORT)
declare -A LOGF=([ebb]=$WORK/ebb/ebb.log [nginx]=$WORK/nginx/error.log [haproxy]=$WORK/haproxy/haproxy.log [fasthttp]=$WORK/fasthttp/fasthttp.log)

mkdir -p "$WORK/ebb" "$WORK/nginx/tmp" "$WORK/haproxy" "$WORK/fasthttp"

cat >"$WORK/ebb/ebb.yaml" <<EOF
admin: { address: 127.0.0.1:0 }
listeners:
  - name: bench
    address: 127.0.0.1:$EBB_PORT
    routes:
      - match: { path_prefix: "/" }
        cluster: origin
clusters:
  - name: origin
    discovery: { static: ["127.0.0.1:$ORIGIN_PORT"] }
telemetry:
  log: { level: warn }
EOF

cat >"$WORK/nginx/nginx.conf" <<EOF
# nginx as a reverse proxy: one worker, pooled keep-alive upstream
# connections, no access log. keepalive_requests is raised on both sides so
# that nginx, like ebb and HAProxy, never closes a busy connection after
# 1000 requests. proxy_max_temp_file_size 0: a 64 KiB response that does
# not fit the default proxy buffers is streamed, not spooled to disk.
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
    client_body_temp_path $WORK/nginx/tmp/body;
    proxy_temp_path       $WORK/nginx/tmp/proxy;
    fastcgi_temp_path     $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path       $WORK/nginx/tmp/uwsgi;
    scgi_temp_path        $WORK/nginx/tmp/scgi;
    upstream origin {
        server 127.0.0.1:$ORIGIN_PORT;
        keepalive 64;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
        }
    }
}
EOF

cat >"$WORK/haproxy/haproxy.cfg" <<EOF
# HAProxy as a reverse proxy: one thread, HTTP mode, server connections
# reused across requests, no logging.
global
    nbthread 1
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 2s
    timeout client 60s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 120s

frontend bench
    bind 127.0.0.1:$HAPROXY_PORT
    default_backend origin

backend origin
    server origin 127.0.0.1:$ORIGIN_PORT
EOF

# start_proxy NAME: start it pinned to CPU 0 and check both bodies.
start_proxy() {
	local name=$1
	case $name in
	ebb)
		taskset -c "$PROXY_CPU" "$WORK/bin/ebb" run -config "$WORK/ebb/ebb.yaml" \
			>"$WORK/ebb/stdout.log" 2>"${LOGF[ebb]}" &
		;;
	nginx)
		taskset -c "$PROXY_CPU" nginx -p "$WORK/nginx" -e "${LOGF[nginx]}" \
			-c "$WORK/nginx/nginx.conf" >"$WORK/nginx/stdout.log" 2>&1 &
		;;
	haproxy)
		# -db: foreground, a single process (no master-worker).
		taskset -c "$PROXY_CPU" haproxy -db -f "$WORK/haproxy/haproxy.cfg" \
			>"${LOGF[haproxy]}" 2>&1 &
		;;
	fasthttp)
		taskset -c "$PROXY_CPU" "$WORK/bin/fasthttp-bare" -listen "127.0.0.1:$FASTHTTP_PORT" \
			-origin "127.0.0.1:$ORIGIN_PORT" >"${LOGF[fasthttp]}" 2>&1 &
		;;
	esac
	PID[$name]=$!
	wait_port "$name" "${PORT[$name]}" "${LOGF[$name]}"
	check_body "$name" "${PORT[$name]}" / "$SMALL_BYTES"
	check_body "$name" "${PORT[$name]}" /64k "$LARGE_BYTES"
}

# worker_pid NAME: the process whose memory is reported (nginx: its worker).
worker_pid() {
	local pid=${PID[$1]}
	if [[ $1 == nginx ]]; then
		local w
		w=$(pgrep -P "$pid" | head -n 1)
		[[ -n $w ]] || die "nginx: no worker process under master $pid"
		echo "$w"
	else
		echo "$pid"
	fi
}

# cpu_ticks NAME: utime+stime, in clock ticks, of the proxy process and its
# live children (nginx's worker). Fields 14 and 15 of /proc/PID/stat; the
# command name in parentheses may hold spaces, so the text up to the last
# ")" is dropped first: then utime and stime are words 12 and 13.
cpu_ticks() {
	local root=${PID[$1]} total=0 p stat rest
	for p in "$root" $(pgrep -P "$root" || true); do
		{ read -r stat <"/proc/$p/stat"; } 2>/dev/null || continue
		rest=${stat##*) }
		read -r -a f <<<"$rest"
		total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

# cpu0_ticks: user+nice+system time of CPU 0, all processes (the proxy's
# CPU). Minus the proxy's own ticks, it is what other processes took from
# the proxy's CPU during a run: it should be near 0.
cpu0_ticks() { awk -v c="cpu$PROXY_CPU" '$1 == c { print $2 + $3 + $4 }' /proc/stat; }

# peak_rss_kb NAME: VmHWM of the working process, in kB.
peak_rss_kb() {
	local w
	w=$(worker_pid "$1")
	awk '/^VmHWM:/ { print $2 }' "/proc/$w/status"
}

# ---------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------

# to_us VALUE: a wrk duration (12.00us, 1.23ms, 2.00s, 1.00m) in µs.
to_us() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		m = (u == "us") ? 1 : (u == "ms") ? 1e3 : (u == "s") ? 1e6 : (u == "m") ? 6e7 : (u == "h") ? 3.6e9 : -1
		if (m < 0) { print "NaN"; exit }
		printf "%.1f", n * m
	}'
}

# run_wrk OUTFILE CONNS DURATION URL: wrk pinned to CPU 1, bounded twice
# (-d and an outer timeout in case it hangs).
run_wrk() {
	local out=$1 conns=$2 dur=$3 url=$4
	timeout --kill-after=5 $((dur + 30)) \
		taskset -c "$LOAD_CPU" wrk -t1 -c"$conns" -d"${dur}s" --latency "$url" >"$out" 2>&1 ||
		{ cat "$out" >&2; die "wrk failed against $url"; }
}

# parse_wrk FILE: "rps requests p50_us p99_us non2xx socket_errors".
parse_wrk() {
	local f=$1 rps reqs p50 p99 non2xx sockerr
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$f")
	reqs=$(awk '/ requests in / { print $1 }' "$f")
	p50=$(awk '$1 == "50%" { print $2 }' "$f")
	p99=$(awk '$1 == "99%" { print $2 }' "$f")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$f")
	# "Socket errors: connect 0, read 0, write 0, timeout 0"
	sockerr=$(awk '/Socket errors:/ { gsub(",", ""); print $4 + $6 + $8 + $10 }' "$f")
	[[ -n $rps && -n $reqs && -n $p50 && -n $p99 ]] || { cat "$f" >&2; die "cannot parse wrk output $f"; }
	echo "$rps $reqs $(to_us "$p50") $(to_us "$p99") ${non2xx:-0} ${sockerr:-0}"
}

# median: the median of the numbers on stdin, one per line.
median() {
	sort -g | awk '{ a[NR] = $1 } END {
		if (NR == 0) { print "NaN"; exit }
		if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2
	}'
}

# Variants: name, path, connections, label.
VARIANTS=(small large latency)
declare -A V_PATH=([small]=/ [large]=/64k [latency]=/)
declare -A V_CONNS=([small]=$CONNS [large]=$CONNS [latency]=1)
declare -A V_LABEL=(
	[small]="$SMALL_BYTES-byte body, $CONNS connections"
	[large]="64 KiB body, $CONNS connections"
	[latency]="$SMALL_BYTES-byte body, 1 connection (latency)"
)

read -r -a PROXY_LIST <<<"$PROXIES"
NP=${#PROXY_LIST[@]}
RUNS=$WORK/runs.tsv # one line per measured run
printf 'variant\tround\tproxy\trps\trequests\tcpu_ticks\tcpu_us_per_req\tp50_us\tp99_us\tnon2xx\tsocket_errors\tcpu0_other_pct\n' >"$RUNS"
declare -A RSS=() # variant,proxy -> VmHWM kB
ERRORS=()         # runs with non-2xx responses or socket errors

# steal_ticks: CPU time the hypervisor took from this machine, all CPUs
# (field 9 of the "cpu" line of /proc/stat). A virtual machine with much
# steal during the run gives slow and noisy figures.
steal_ticks() { awk '$1 == "cpu" { print $9 }' /proc/stat; }
STEAL0=$(steal_ticks)
T0=$(date +%s)

start_origin

# Calibration: wrk straight to the origin, wrk on CPU 0 (where the proxies
# will run), origin on CPU 1. Not a proxy figure: it tells how fast this
# machine is today, to compare reports taken at different times.
log "calibration: wrk straight to the origin (${DURATION}s)"
timeout --kill-after=5 $((DURATION + 30)) taskset -c "$PROXY_CPU" \
	wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$ORIGIN_PORT/" >"$WORK/calibration.txt" 2>&1 ||
	{ cat "$WORK/calibration.txt" >&2; die "wrk failed against the origin"; }
CALIB_RPS=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$WORK/calibration.txt")
log "  origin direct: $CALIB_RPS req/s"

for v in "${VARIANTS[@]}"; do
	log "variant $v: ${V_LABEL[$v]}"
	# Fresh proxies for each variant, so that the peak RSS is this variant's.
	for p in "${PROXY_LIST[@]}"; do start_proxy "$p"; done
	if ((WARMUP > 0)); then
		for p in "${PROXY_LIST[@]}"; do
			log "  warm-up $p (${WARMUP}s)"
			run_wrk "$WORK/warmup-$v-$p.txt" "${V_CONNS[$v]}" "$WARMUP" "http://127.0.0.1:${PORT[$p]}${V_PATH[$v]}"
		done
	fi
	for ((r = 0; r < ROUNDS; r++)); do
		# Rotate the order each round: round r starts with proxy r mod NP.
		for ((i = 0; i < NP; i++)); do
			p=${PROXY_LIST[$(((r + i) % NP))]}
			out=$WORK/wrk-$v-$p-$r.txt
			t0=$(cpu_ticks "$p")
			c0=$(cpu0_ticks)
			run_wrk "$out" "${V_CONNS[$v]}" "$DURATION" "http://127.0.0.1:${PORT[$p]}${V_PATH[$v]}"
			t1=$(cpu_ticks "$p")
			c1=$(cpu0_ticks)
			res=$(parse_wrk "$out")
			read -r rps reqs p50 p99 non2xx sockerr <<<"$res"
			ticks=$((t1 - t0))
			cpu_us=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
			other=$(awk -v o="$((c1 - c0 - ticks))" -v hz="$CLK_TCK" -v d="$DURATION" \
				'BEGIN { if (o < 0) o = 0; printf "%.1f", 100 * o / hz / d }')
			printf '%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
				"$v" "$((r + 1))" "$p" "$rps" "$reqs" "$ticks" "$cpu_us" "$p50" "$p99" "$non2xx" "$sockerr" "$other" >>"$RUNS"
			log "  round $((r + 1))/$ROUNDS $p: $rps req/s, $cpu_us µs CPU/req, p50 ${p50} µs, p99 ${p99} µs, others on CPU $PROXY_CPU: ${other}%"
			if [[ $non2xx != 0 || $sockerr != 0 ]]; then
				ERRORS+=("$v round $((r + 1)) $p: $non2xx non-2xx responses, $sockerr socket errors")
				log "  WARNING: $p: $non2xx non-2xx responses, $sockerr socket errors:"
				grep -E 'Non-2xx|Socket errors' "$out" >&2 || true
			fi
		done
	done
	for p in "${PROXY_LIST[@]}"; do
		RSS[$v,$p]=$(peak_rss_kb "$p")
		stop_pid "$p"
	done
done

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

STEAL=$(awk -v s="$(($(steal_ticks) - STEAL0))" -v hz="$CLK_TCK" -v t="$(($(date +%s) - T0))" -v n="$(nproc --all)" \
	'BEGIN { printf "%.1f%%", (t > 0) ? 100 * s / hz / (t * n) : 0 }')

# Other processes' share of the proxy's CPU over the measured runs.
OTHER_MED=$(awk -F'\t' 'NR > 1 { print $12 }' "$RUNS" | median)
OTHER_MAX=$(awk -F'\t' 'NR > 1 && $12 > m { m = $12 } END { print m + 0 }' "$RUNS")

mkdir -p "$BENCH_DIR/results"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
REPORT=$BENCH_DIR/results/$STAMP.md

# col VARIANT PROXY COLUMN: the median of one column of runs.tsv.
col() {
	awk -F'\t' -v v="$1" -v p="$2" -v c="$3" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
		$1 == v && $3 == p { print $k }' "$RUNS" | median
}

has_proxy() { [[ " $PROXIES " == *" $1 "* ]]; }

# ratio A B: A/B to two decimals, "–" if B is missing.
ratio() { awk -v a="$1" -v b="${2:-}" 'BEGIN { if (b == "" || b + 0 == 0) print "–"; else printf "%.2f", a / b }'; }

# fmt_us µs: 123.4 -> "123 µs", 1234.5 -> "1.23 ms".
fmt_us() { awk -v x="$1" 'BEGIN { if (x >= 1000) printf "%.2f ms", x / 1000; else printf "%.0f µs", x }'; }

{
	echo "# ebb benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo
	echo "- ebb $EBB_COMMIT$EBB_DIRTY, $(go version | awk '{ print $3 }')"
	echo "- $(nginx -v 2>&1 | sed 's/^nginx version: //'), HAProxy $(haproxy -v | awk 'NR == 1 { print $3 }'), wrk $(wrk -v 2>&1 | awk 'NR == 1 { print $2 }')"
	echo "- $(nproc --all) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), kernel $(uname -r)"
	echo "- proxy on CPU $PROXY_CPU; origin (nginx) and \`taskset -c $LOAD_CPU wrk -t1\` on CPU $LOAD_CPU"
	echo "- ${DURATION}s per run, $ROUNDS interleaved rounds, ${WARMUP}s warm-up; figures are medians over rounds"
	echo "- other processes on CPU $PROXY_CPU during the measured runs: median $OTHER_MED%, max $OTHER_MAX%"
	if awk -v m="$OTHER_MAX" 'BEGIN { exit !(m > 5) }'; then
		echo "- **warning: the machine was not quiet; req/s and latency are disturbed (µs CPU/req less so)**"
	fi
	echo "- calibration, wrk straight to the origin ($SMALL_BYTES B, $CONNS conns, wrk on CPU $PROXY_CPU): $CALIB_RPS req/s; CPU steal during the run: $STEAL"
	echo "- µs CPU/req: the proxy's utime+stime during the run over wrk's request count; peak RSS: VmHWM (nginx: worker) after the variant"
	for v in "${VARIANTS[@]}"; do
		echo
		echo "## ${V_LABEL[$v]}"
		echo
		echo "| proxy | req/s | vs nginx | vs HAProxy | µs CPU/req | p50 | p99 | peak RSS |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|"
		ngx=""
		hap=""
		if has_proxy nginx; then ngx=$(col "$v" nginx rps); fi
		if has_proxy haproxy; then hap=$(col "$v" haproxy rps); fi
		for p in "${PROXY_LIST[@]}"; do
			rps=$(col "$v" "$p" rps)
			printf '| %s | %.0f | %s | %s | %.2f | %s | %s | %.1f MiB |\n' \
				"$p" "$rps" "$(ratio "$rps" "$ngx")" "$(ratio "$rps" "$hap")" \
				"$(col "$v" "$p" cpu_us_per_req)" "$(fmt_us "$(col "$v" "$p" p50_us)")" \
				"$(fmt_us "$(col "$v" "$p" p99_us)")" "$(awk -v k="${RSS[$v,$p]}" 'BEGIN { print k / 1024 }')"
		done
	done
	if has_proxy ebb; then
		echo
		echo "## Headline (${V_LABEL[small]}, req/s)"
		echo
		if has_proxy nginx; then
			echo "ebb/nginx: $(ratio "$(col small ebb rps)" "$(col small nginx rps)")  "
		fi
		if has_proxy haproxy; then
			echo "ebb/HAProxy: $(ratio "$(col small ebb rps)" "$(col small haproxy rps)")  "
		fi
		# The same comparison in CPU per request (above 1: ebb costs more).
		if has_proxy nginx; then
			echo "µs CPU/req, ebb/nginx: $(ratio "$(col small ebb cpu_us_per_req)" "$(col small nginx cpu_us_per_req)")  "
		fi
		if has_proxy haproxy; then
			echo "µs CPU/req, ebb/HAProxy: $(ratio "$(col small ebb cpu_us_per_req)" "$(col small haproxy cpu_us_per_req)")  "
		fi
		if has_proxy fasthttp; then
			echo "ebb/fasthttp-bare: $(ratio "$(col small ebb rps)" "$(col small fasthttp rps)") in req/s, $(ratio "$(col small ebb cpu_us_per_req)" "$(col small fasthttp cpu_us_per_req)") in µs CPU/req  "
		fi
	fi
	echo
	echo "## Errors"
	echo
	if ((${#ERRORS[@]} == 0)); then
		echo "wrk reported no non-2xx responses and no socket errors."
	else
		for e in "${ERRORS[@]}"; do echo "- $e"; done
	fi
	echo
	echo "## Raw runs"
	echo
	echo '```'
	column -t -s $'\t' "$RUNS" 2>/dev/null || cat "$RUNS"
	echo '```'
} >"$REPORT"

cat "$REPORT"
log "report written to $REPORT"
