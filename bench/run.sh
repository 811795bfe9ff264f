#!/usr/bin/env bash
# bench/run.sh: ebb against nginx and HAProxy as reverse proxies, over
# HTTP/1.1 and HTTP/2 (h2c), and ebb in front of a gRPC server.
#
# One run measures up to seven parts, each of one or more variants, with
# the rounds interleaved so that drift in the machine hits every proxy
# alike. See bench/README.md for what the figures mean.
#
#   h1    wrk (HTTP/1.1): 64-byte body at 64 connections, 64 KiB body at 64
#         connections, one-connection latency; ebb, nginx, HAProxy and
#         bench/fasthttp-bare
#   h2c   h2load, HTTP/2 cleartext with prior knowledge, 8 connections x 16
#         streams, 64-byte body, HTTP/1.1 to the origin; ebb, nginx, HAProxy
#         and h2load -c100 -m1: many connections, one stream each
#   h2tls h2load over TLS (ALPN h2), 8 connections x 16 streams, 64-byte
#         body; ebb, nginx, HAProxy
#   idle  memory per idle HTTP/2 connection: bench/idle-h2 opens IDLE_CONNS
#         h2c connections, one request each, and holds them; the proxy's
#         VmRSS before and after, over the connections
#   idle-h1  the same over HTTP/1.1 keep-alive (bench/idle-h2 -proto h1),
#         IDLE_H1_CONNS connections; every proxy that speaks HTTP/1.1
#   slowloris  a normal client's latency (wrk, SLOW_CLIENT_CONNS
#         connections) without and then during an attack of SLOW_CONNS slow
#         connections (bench/slowloris: heads that never end, POST bodies a
#         byte a second), and how many of those the proxy still holds after
#         SLOW_HOLD seconds; ebb, nginx, HAProxy; not in the default PARTS
#   grpc  unary gRPC calls (bench/grpc-bench) straight to a Go gRPC server
#         ("direct") and through ebb (protocol: h2c upstream), nginx
#         (grpc_pass) and HAProxy (proto h2 server)
#
# Layout (2 CPUs):
#   CPU 0: the proxy under test (all of a variant's proxies run, only the
#          one being measured gets traffic)
#   CPU 1: the origin (nginx; the gRPC server for grpc) and the load
#          generator (wrk, h2load or the gRPC client)
#
# Knobs (environment):
#   PARTS=h1,h2c,h2tls,idle,idle-h1,grpc   parts to run (any subset; commas
#                 or spaces; slowloris too)
#   DURATION=10   seconds per measured run
#   ROUNDS=5      measured runs per proxy and variant (the median is kept)
#   WARMUP=2      seconds of unmeasured load per proxy before each variant
#   CONNS=64      connections for the h1 throughput variants
#   H2_CONNS=8 H2_STREAMS=16   h2load -c and -m (h2c and h2tls parts)
#   H2_WIDE_CONNS=100          h2load -c of the h2c part's one-stream variant
#   IDLE_CONNS=2000            connections the idle part holds
#   IDLE_H1_CONNS=10000        connections the idle-h1 part holds
#   SLOW_CONNS=1000 SLOW_HOLD=30 SLOW_CLIENT_CONNS=8   slowloris: attack
#                 connections, seconds the attack lasts, wrk's connections
#   GRPC_CONCURRENCY="1 16"    calls in flight, one grpc variant each
#   PROXIES="ebb nginx haproxy fasthttp"   proxies to measure (any subset);
#                 fasthttp is bench/fasthttp-bare, the barest fasthttp proxy
#                 (h1 only); the grpc part measures direct and, if listed, ebb;
#                 ebb-log (h1 and h2c parts) is ebb with its access log on
#                 (JSON to a file; the others, ebb included, log no requests):
#                 what the access log costs; ebb-trace100 and ebb-trace1
#                 (h1 and h2c parts) are ebb with tracing on, sampling 100 %
#                 and 1 % of requests, exporting over OTLP/gRPC to
#                 bench/otlp-sink (on CPU 1): what tracing costs
#   BASE=REF      also measure ebb as built from the git commit REF (proxy
#                 "base": h1, h2c, idle-h1 and slowloris parts), interleaved
#                 with today's ebb:
#                 the way to see what a change costs or buys
#   PROFILE=0     1: after the h2c rounds, profile ebb (CPU, allocations)
#                 under one more h2load run; saved next to the report
#   ORIGIN_PORT=18000 EBB_PORT=18080 NGINX_PORT=18081 HAPROXY_PORT=18082
#   FASTHTTP_PORT=18083 NGINX_H2C_PORT=18084 HAPROXY_H2C_PORT=18085
#   BASE_PORT=18090 BASE_ADMIN_PORT=18091 EBB_LOG_PORT=18097 EBB_LOG_ADMIN_PORT=18098
#   EBB_TRACE100_PORT=18101 EBB_TRACE100_ADMIN_PORT=18102 EBB_TRACE1_PORT=18103
#   EBB_TRACE1_ADMIN_PORT=18104 OTLP_PORT=18105 (ebb-trace100's sink; ebb-trace1's
#   is OTLP_PORT+1)
#   EBB_TLS_PORT=18092 NGINX_TLS_PORT=18093 HAPROXY_TLS_PORT=18094
#   GRPC_PORT=18086 EBB_GRPC_PORT=18087 EBB_ADMIN_PORT=18089
#   NGINX_GRPC_PORT=18095 HAPROXY_GRPC_PORT=18096
#   KEEP_WORK=1   keep the temporary directory (configs, logs, raw output)
set -euo pipefail

PARTS=${PARTS:-h1,h2c,h2tls,idle,idle-h1,grpc}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-5}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-64}
H2_CONNS=${H2_CONNS:-8}
H2_STREAMS=${H2_STREAMS:-16}
H2_WIDE_CONNS=${H2_WIDE_CONNS:-100}
IDLE_CONNS=${IDLE_CONNS:-2000}
IDLE_H1_CONNS=${IDLE_H1_CONNS:-10000}
SLOW_CONNS=${SLOW_CONNS:-1000}
SLOW_HOLD=${SLOW_HOLD:-30}
SLOW_CLIENT_CONNS=${SLOW_CLIENT_CONNS:-8}
EBB_TLS_PORT=${EBB_TLS_PORT:-18092}
NGINX_TLS_PORT=${NGINX_TLS_PORT:-18093}
HAPROXY_TLS_PORT=${HAPROXY_TLS_PORT:-18094}
GRPC_CONCURRENCY=${GRPC_CONCURRENCY:-"1 16"}
PROXIES=${PROXIES:-"ebb nginx haproxy fasthttp"}
PROFILE=${PROFILE:-0}
ORIGIN_PORT=${ORIGIN_PORT:-18000}
EBB_PORT=${EBB_PORT:-18080}
BASE_PORT=${BASE_PORT:-18090}
BASE_ADMIN_PORT=${BASE_ADMIN_PORT:-18091}
EBB_LOG_PORT=${EBB_LOG_PORT:-18097}
EBB_LOG_ADMIN_PORT=${EBB_LOG_ADMIN_PORT:-18098}
EBB_TRACE100_PORT=${EBB_TRACE100_PORT:-18101}
EBB_TRACE100_ADMIN_PORT=${EBB_TRACE100_ADMIN_PORT:-18102}
EBB_TRACE1_PORT=${EBB_TRACE1_PORT:-18103}
EBB_TRACE1_ADMIN_PORT=${EBB_TRACE1_ADMIN_PORT:-18104}
OTLP_PORT=${OTLP_PORT:-18105}
BASE=${BASE:-}
NGINX_PORT=${NGINX_PORT:-18081}
HAPROXY_PORT=${HAPROXY_PORT:-18082}
FASTHTTP_PORT=${FASTHTTP_PORT:-18083}
NGINX_H2C_PORT=${NGINX_H2C_PORT:-18084}
HAPROXY_H2C_PORT=${HAPROXY_H2C_PORT:-18085}
GRPC_PORT=${GRPC_PORT:-18086}
EBB_GRPC_PORT=${EBB_GRPC_PORT:-18087}
NGINX_GRPC_PORT=${NGINX_GRPC_PORT:-18095}
HAPROXY_GRPC_PORT=${HAPROXY_GRPC_PORT:-18096}
EBB_ADMIN_PORT=${EBB_ADMIN_PORT:-18089}
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

declare -A WANT_PART=()
for part in ${PARTS//,/ }; do
	case $part in h1 | h2c | h2tls | idle | idle-h1 | grpc | slowloris) WANT_PART[$part]=1 ;; *) die "unknown part '$part' in PARTS (h1, h2c, h2tls, idle, idle-h1, grpc, slowloris)" ;; esac
done
((${#WANT_PART[@]} > 0)) || die "PARTS names no part"
has_part() { [[ -n ${WANT_PART[$1]:-} ]]; }
PARTS_RUN=""
for part in h1 h2c h2tls idle idle-h1 grpc slowloris; do
	if has_part "$part"; then PARTS_RUN+="${PARTS_RUN:+, }$part"; fi
done
has_proxy() { [[ " $PROXIES " == *" $1 "* ]]; }
# EBB_KINDS: ebb as measured with something on that the plain ebb has off,
# each on its own ports with its own configuration (see below).
EBB_KINDS=(ebb-log ebb-trace100 ebb-trace1)
is_ebb_kind() { [[ " ${EBB_KINDS[*]} " == *" $1 "* ]]; }
has_tracing() { has_proxy ebb-trace100 || has_proxy ebb-trace1; }

TOOLS=(go nginx wrk curl taskset getconf pgrep)
has_proxy haproxy && TOOLS+=(haproxy)
if has_part h2c || has_part h2tls; then TOOLS+=(h2load); fi
has_part h2tls && TOOLS+=(openssl)
for tool in "${TOOLS[@]}"; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[[ $(nproc --all) -ge 2 ]] || die "needs at least 2 CPUs (proxy on CPU $PROXY_CPU, load on CPU $LOAD_CPU)"
for knob in DURATION ROUNDS H2_CONNS H2_STREAMS H2_WIDE_CONNS IDLE_CONNS IDLE_H1_CONNS SLOW_CONNS SLOW_HOLD SLOW_CLIENT_CONNS; do
	[[ ${!knob} =~ ^[0-9]+$ && ${!knob} -gt 0 ]] || die "$knob must be a positive integer"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer"
# The client's run under attack starts once the slow connections are open
# (a second or two) and must end before the attack does.
if has_part slowloris && ((SLOW_HOLD < DURATION + 5)); then
	die "SLOW_HOLD ($SLOW_HOLD s) must be at least DURATION + 5 ($((DURATION + 5)) s)"
fi

# Open files: the most connections a part holds, plus room for the
# upstream connections, listeners and logs. The load tools and the proxies
# inherit the limit (HAProxy raises its own from maxconn; Go raises its
# soft limit to the hard one). Above the hard limit only root may go.
MOST_CONNS=$CONNS
if has_part idle && ((IDLE_CONNS > MOST_CONNS)); then MOST_CONNS=$IDLE_CONNS; fi
if has_part idle-h1 && ((IDLE_H1_CONNS > MOST_CONNS)); then MOST_CONNS=$IDLE_H1_CONNS; fi
if has_part slowloris && ((SLOW_CONNS + SLOW_CLIENT_CONNS > MOST_CONNS)); then MOST_CONNS=$((SLOW_CONNS + SLOW_CLIENT_CONNS)); fi
NOFILE=$((MOST_CONNS + 1024))
if [[ $(ulimit -Sn) != unlimited ]] && (($(ulimit -Sn) < NOFILE)); then
	if [[ $(ulimit -Hn) == unlimited ]] || (($(ulimit -Hn) >= NOFILE)); then
		ulimit -Sn "$NOFILE"
	else
		ulimit -n "$NOFILE" 2>/dev/null ||
			die "needs $NOFILE open files (ulimit -n) for $MOST_CONNS connections; the hard limit is $(ulimit -Hn) (raise it, or run as root)"
	fi
fi
# Every connection of a part comes from 127.0.0.1 to one port: it needs as
# many local ports.
read -r PORT_LO PORT_HI </proc/sys/net/ipv4/ip_local_port_range
((MOST_CONNS + 1000 <= PORT_HI - PORT_LO)) ||
	die "$MOST_CONNS connections need more local ports than net.ipv4.ip_local_port_range ($PORT_LO-$PORT_HI) has"
for c in $GRPC_CONCURRENCY; do
	[[ $c =~ ^[0-9]+$ && $c -gt 0 ]] || die "GRPC_CONCURRENCY must be positive integers"
done
if [[ -n $BASE ]] && ! has_proxy base; then PROXIES+=" base"; fi
for p in $PROXIES; do
	case $p in ebb | ebb-log | ebb-trace100 | ebb-trace1 | nginx | haproxy | fasthttp) ;; base) [[ -n $BASE ]] || die "proxy 'base' needs BASE (a git commit)" ;; *) die "unknown proxy '$p' in PROXIES" ;; esac
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

# await_ready NAME FILE SECONDS: wait until the load helper started as
# PID[NAME] has printed its "ready" line to FILE, at most SECONDS; false
# if it did not (it died, or the time ran out).
await_ready() {
	local name=$1 out=$2 i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -qs '^ready' "$out" && return 0
		alive "${PID[$name]}" || break
		sleep 0.1
	done
	grep -qs '^ready' "$out"
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

# check_h2c NAME PORT PATH BYTES [https]: the same over HTTP/2 with prior
# knowledge, or over TLS with ALPN h2.
check_h2c() {
	local name=$1 port=$2 path=$3 want=$4 scheme=${5:-http} got flags=(--http2-prior-knowledge)
	[[ $scheme == http ]] || flags=(--http2 -k)
	got=$(curl -sS "${flags[@]}" --max-time 5 -o /dev/null \
		-w '%{http_version} %{http_code} %{size_download}' "$scheme://127.0.0.1:$port$path") ||
		die "$name: curl ${flags[*]} $scheme://127.0.0.1:$port$path failed"
	[[ $got == "2 200 $want" ]] ||
		die "$name: HTTP/2 GET $scheme://127.0.0.1:$port$path answered '$got' (HTTP version, status, bytes); want '2 200 $want'"
}

# ---------------------------------------------------------------------------
# Build ebb (and the helpers the chosen parts need)
# ---------------------------------------------------------------------------

if has_proxy ebb || has_proxy ebb-log || has_tracing; then
	log "building ebb from $REPO_DIR"
	(cd "$REPO_DIR" && go build -o "$WORK/bin/ebb" ./cmd/ebb) || die "go build ./cmd/ebb failed"
fi
if has_tracing; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/otlp-sink" ./bench/otlp-sink) || die "go build ./bench/otlp-sink failed"
fi
if has_proxy fasthttp; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/fasthttp-bare" ./bench/fasthttp-bare) || die "go build ./bench/fasthttp-bare failed"
fi
if has_proxy base; then
	BASE_COMMIT=$(git -C "$REPO_DIR" rev-parse --verify --short=12 "$BASE^{commit}" 2>/dev/null) ||
		die "BASE: $BASE is not a commit of $REPO_DIR"
	log "building ebb from $BASE ($BASE_COMMIT) as proxy base"
	mkdir -p "$WORK/base-src"
	git -C "$REPO_DIR" archive "$BASE_COMMIT" | tar -x -C "$WORK/base-src" || die "git archive $BASE_COMMIT failed"
	(cd "$WORK/base-src" && go build -o "$WORK/bin/ebb-base" ./cmd/ebb) || die "go build ./cmd/ebb at $BASE_COMMIT failed"
fi
if has_part grpc; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/grpc-bench" ./bench/grpc-bench) || die "go build ./bench/grpc-bench failed"
fi
if has_part idle || has_part idle-h1; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/idle-h2" ./bench/idle-h2) || die "go build ./bench/idle-h2 failed"
fi
if has_part slowloris; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/slowloris" ./bench/slowloris) || die "go build ./bench/slowloris failed"
fi
if has_part h2tls; then
	# A throwaway certificate for 127.0.0.1 (HAProxy wants certificate and
	# key in one file).
	mkdir -p "$WORK/tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
		-keyout "$WORK/tls/key.pem" -out "$WORK/tls/cert.pem" >"$WORK/tls/openssl.log" 2>&1 ||
		{ cat "$WORK/tls/openssl.log" >&2; die "openssl could not make a test certificate"; }
	cat "$WORK/tls/cert.pem" "$WORK/tls/key.pem" >"$WORK/tls/haproxy.pem"
fi
EBB_COMMIT=$(cd "$REPO_DIR" && git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
EBB_DIRTY=$(cd "$REPO_DIR" && [[ -n $(git status --porcelain 2>/dev/null) ]] && echo " (working tree modified)" || true)

declare -A PORT=([ebb]=$EBB_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT [fasthttp]=$FASTHTTP_PORT [base]=$BASE_PORT
	[ebb-log]=$EBB_LOG_PORT [ebb-trace100]=$EBB_TRACE100_PORT [ebb-trace1]=$EBB_TRACE1_PORT)
declare -A ADMIN_PORT=([ebb-log]=$EBB_LOG_ADMIN_PORT [ebb-trace100]=$EBB_TRACE100_ADMIN_PORT [ebb-trace1]=$EBB_TRACE1_ADMIN_PORT)
# Each tracing ebb exports to a sink of its own, so that each count is its own.
declare -A SINK_PORT=([ebb-trace100]=$OTLP_PORT [ebb-trace1]=$((OTLP_PORT + 1)))
# ebb serves HTTP/1.1 and h2c (prior knowledge) on one port; nginx and
# HAProxy get a second, HTTP/2-only, port.
declare -A H2C_PORT=([ebb]=$EBB_PORT [nginx]=$NGINX_H2C_PORT [haproxy]=$HAPROXY_H2C_PORT [base]=$BASE_PORT
	[ebb-log]=$EBB_LOG_PORT [ebb-trace100]=$EBB_TRACE100_PORT [ebb-trace1]=$EBB_TRACE1_PORT)
declare -A TLS_PORT=([ebb]=$EBB_TLS_PORT [nginx]=$NGINX_TLS_PORT [haproxy]=$HAPROXY_TLS_PORT)
declare -A GRPC_TARGET_PORT=([direct]=$GRPC_PORT [ebb]=$EBB_GRPC_PORT [nginx]=$NGINX_GRPC_PORT [haproxy]=$HAPROXY_GRPC_PORT)

USED_PORTS=("$ORIGIN_PORT")
for p in $PROXIES; do
	USED_PORTS+=("${PORT[$p]}")
	if (has_part h2c || has_part idle) && [[ $p != fasthttp ]]; then USED_PORTS+=("${H2C_PORT[$p]}"); fi
	if has_part h2tls && [[ -n ${TLS_PORT[$p]:-} ]]; then USED_PORTS+=("${TLS_PORT[$p]}"); fi
done
has_proxy ebb && USED_PORTS+=("$EBB_ADMIN_PORT")
has_proxy base && USED_PORTS+=("$BASE_ADMIN_PORT")
for p in "${EBB_KINDS[@]}"; do
	if has_proxy "$p"; then USED_PORTS+=("${ADMIN_PORT[$p]}"); fi
done
has_proxy ebb-trace100 && USED_PORTS+=("${SINK_PORT[ebb-trace100]}")
has_proxy ebb-trace1 && USED_PORTS+=("${SINK_PORT[ebb-trace1]}")
has_part grpc && USED_PORTS+=("$GRPC_PORT")
has_part grpc && has_proxy ebb && USED_PORTS+=("$EBB_GRPC_PORT")
has_part grpc && has_proxy nginx && USED_PORTS+=("$NGINX_GRPC_PORT")
has_part grpc && has_proxy haproxy && USED_PORTS+=("$HAPROXY_GRPC_PORT")
for port in $(printf '%s\n' "${USED_PORTS[@]}" | sort -u); do
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
        # The slowloris part's POSTs: an application reads the whole body
        # before it answers; "return" would answer at once. nginx reads
        # the body (proxy_request_buffering), then asks itself for /.
        location = /slow {
            proxy_pass http://127.0.0.1:$ORIGIN_PORT/;
            proxy_method GET;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
        }
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
	if has_part slowloris; then
		local got
		got=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code} %{size_download}' --data-binary xyz \
			"http://127.0.0.1:$ORIGIN_PORT/slow") || die "origin: curl -d xyz http://127.0.0.1:$ORIGIN_PORT/slow failed"
		[[ $got == "200 $SMALL_BYTES" ]] || die "origin: POST /slow answered '$got' (status, bytes); want '200 $SMALL_BYTES'"
	fi
}

# The gRPC server (grpc part): bench/grpc-bench -mode server on CPU 1, in
# the origin's place.
start_grpc_server() {
	log "starting the gRPC server on 127.0.0.1:$GRPC_PORT (CPU $LOAD_CPU)"
	mkdir -p "$WORK/grpc"
	taskset -c "$LOAD_CPU" "$WORK/bin/grpc-bench" -mode server -addr "127.0.0.1:$GRPC_PORT" \
		>"$WORK/grpc/server.log" 2>&1 &
	PID[grpc-server]=$!
	wait_port grpc-server "$GRPC_PORT" "$WORK/grpc/server.log"
	check_grpc grpc-server "$GRPC_PORT"
}

# start_sinks: an OTLP/gRPC sink (bench/otlp-sink) on the load CPU for
# each tracing ebb measured, up for the whole run.
start_sinks() {
	local p
	for p in ebb-trace100 ebb-trace1; do
		has_proxy "$p" || continue
		mkdir -p "$WORK/sink-$p"
		taskset -c "$LOAD_CPU" "$WORK/bin/otlp-sink" -addr "127.0.0.1:${SINK_PORT[$p]}" \
			>"$WORK/sink-$p/out.log" 2>&1 &
		PID[sink-$p]=$!
		await_ready "sink-$p" "$WORK/sink-$p/out.log" 10 ||
			{ cat "$WORK/sink-$p/out.log" >&2; die "otlp-sink for $p did not start"; }
	done
}

# stop_sinks: stop them; SPANS[PROXY] is what each was sent.
declare -A SPANS=()
stop_sinks() {
	local p
	for p in ebb-trace100 ebb-trace1; do
		[[ -n ${PID[sink-$p]:-} ]] || continue
		stop_pid "sink-$p"
		SPANS[$p]=$(sed -n 's/^spans=\([0-9]*\) .*/\1/p' "$WORK/sink-$p/out.log")
		[[ -n ${SPANS[$p]} ]] || { cat "$WORK/sink-$p/out.log" >&2; die "otlp-sink for $p printed no count"; }
	done
}

# check_grpc NAME PORT: a short run of the gRPC client must succeed (it
# checks that every answer echoes what it sent) without errors.
check_grpc() {
	local name=$1 port=$2 out
	out=$(timeout --kill-after=5 30 "$WORK/bin/grpc-bench" -mode client -target "127.0.0.1:$port" \
		-duration 200ms 2>&1) || { printf '%s\n' "$out" >&2; die "$name: gRPC calls to port $port failed"; }
	[[ $out == *" errors=0 "* ]] || { printf '%s\n' "$out" >&2; die "$name: gRPC calls to port $port had errors"; }
}

# ---------------------------------------------------------------------------
# Proxies, all on CPU 0, all with keep-alive to the origin, no logging.
# ---------------------------------------------------------------------------

declare -A LOGF=([ebb]=$WORK/ebb/ebb.log [nginx]=$WORK/nginx/error.log [haproxy]=$WORK/haproxy/haproxy.log [fasthttp]=$WORK/fasthttp/fasthttp.log [base]=$WORK/base/ebb.log)
for p in "${EBB_KINDS[@]}"; do LOGF[$p]=$WORK/$p/ebb.log; done

mkdir -p "$WORK/ebb" "$WORK/nginx/tmp" "$WORK/haproxy" "$WORK/fasthttp" "$WORK/base" "$WORK/ebb-log" "$WORK/ebb-trace100" "$WORK/ebb-trace1"

# One listener serves HTTP/1.1 and h2c (sniffed); the cluster speaks
# HTTP/1.1 to the origin (protocol: http1, the default). No access log,
# as nginx and HAProxy have none here (ebb-log measures one).
cat >"$WORK/ebb/ebb.yaml" <<EOF
admin: { address: 127.0.0.1:$EBB_ADMIN_PORT }
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
  access_log: { enabled: false }
EOF

# The base build: the same configuration on its own ports. (A base from
# before telemetry.access_log existed has no such key.)
sed -e "s/127.0.0.1:$EBB_ADMIN_PORT/127.0.0.1:$BASE_ADMIN_PORT/" -e "s/127.0.0.1:$EBB_PORT/127.0.0.1:$BASE_PORT/" \
	"$WORK/ebb/ebb.yaml" >"$WORK/base/ebb.yaml"
if has_proxy base && ! git -C "$REPO_DIR" show "$BASE_COMMIT:config/schema.go" | grep -q 'key:"access_log"'; then
	sed -i '/access_log:/d' "$WORK/base/ebb.yaml"
fi
# ebb-log: the same with the access log on, to a file (emptied before
# each run: see run_load).
sed -e "s/127.0.0.1:$EBB_ADMIN_PORT/127.0.0.1:$EBB_LOG_ADMIN_PORT/" -e "s/127.0.0.1:$EBB_PORT/127.0.0.1:$EBB_LOG_PORT/" \
	-e "s|access_log: { enabled: false }|access_log: { enabled: true, format: json, path: \"$WORK/ebb-log/access.log\" }|" \
	"$WORK/ebb/ebb.yaml" >"$WORK/ebb-log/ebb.yaml"
# ebb-trace100 and ebb-trace1: the plain ebb (no access log) with tracing
# on, every trace starting at ebb (wrk and h2load send no traceparent),
# exported to bench/otlp-sink. The batch span processor's defaults hold
# (queues of 2,048 spans, batches of 512 every 5 s): spans it has no room
# for are dropped, as they would be in production, and the report says how
# many reached the sink.
for p in ebb-trace100 ebb-trace1; do
	share=1
	[[ $p == ebb-trace100 ]] || share=0.01
	sed -e "s/127.0.0.1:$EBB_ADMIN_PORT/127.0.0.1:${ADMIN_PORT[$p]}/" -e "s/127.0.0.1:$EBB_PORT/127.0.0.1:${PORT[$p]}/" \
		"$WORK/ebb/ebb.yaml" >"$WORK/$p/ebb.yaml"
	printf '  tracing: { enabled: true, protocol: grpc, endpoint: "http://127.0.0.1:%s", sampling_ratio: %s }\n' \
		"${SINK_PORT[$p]}" "$share" >>"$WORK/$p/ebb.yaml"
done

# The h2tls part: a second listener with TLS (not in the base's copy: the
# base runs no TLS variant).
if has_part h2tls; then
	awk -v port="$EBB_TLS_PORT" -v dir="$WORK/tls" '{ print } /^listeners:$/ {
		print "  - name: bench-tls"
		print "    address: 127.0.0.1:" port
		print "    tls: { cert: \"" dir "/cert.pem\", key: \"" dir "/key.pem\" }"
		print "    routes:"
		print "      - match: { path_prefix: \"/\" }"
		print "        cluster: origin"
	}' "$WORK/ebb/ebb.yaml" >"$WORK/ebb/ebb.yaml.new" && mv "$WORK/ebb/ebb.yaml.new" "$WORK/ebb/ebb.yaml"
fi

# The grpc part: the same, in front of the gRPC server over h2c.
cat >"$WORK/ebb/ebb-grpc.yaml" <<EOF
admin: { address: 127.0.0.1:$EBB_ADMIN_PORT }
listeners:
  - name: grpc
    address: 127.0.0.1:$EBB_GRPC_PORT
    routes:
      - match: { path_prefix: "/" }
        cluster: grpc
clusters:
  - name: grpc
    protocol: h2c
    discovery: { static: ["127.0.0.1:$GRPC_PORT"] }
telemetry:
  log: { level: warn }
EOF

# The h2c front ends of nginx and HAProxy exist only when the part runs.
NGINX_H2C_SERVER=""
HAPROXY_H2C_FRONTEND=""
if has_part h2c || has_part idle; then
	# nginx 1.22 has no "http2 on;" (1.25.1+): "listen ... http2" without
	# ssl is HTTP/2 with prior knowledge only.
	NGINX_H2C_SERVER="
    server {
        listen 127.0.0.1:$NGINX_H2C_PORT http2;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_max_temp_file_size 0;
        }
    }"
	HAPROXY_H2C_FRONTEND="
frontend bench_h2c
    bind 127.0.0.1:$HAPROXY_H2C_PORT proto h2
    default_backend origin"
fi
if has_part grpc; then
	NGINX_H2C_SERVER+="
    server {
        listen 127.0.0.1:$NGINX_GRPC_PORT http2;
        location / {
            grpc_pass grpc://grpc_origin;
        }
    }"
	HAPROXY_H2C_FRONTEND+="

frontend bench_grpc
    bind 127.0.0.1:$HAPROXY_GRPC_PORT proto h2
    default_backend grpc_origin

backend grpc_origin
    server grpc 127.0.0.1:$GRPC_PORT proto h2"
fi
if has_part h2tls; then
	NGINX_H2C_SERVER+="
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
        ssl_certificate     $WORK/tls/cert.pem;
        ssl_certificate_key $WORK/tls/key.pem;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_max_temp_file_size 0;
        }
    }"
	HAPROXY_H2C_FRONTEND+="

frontend bench_h2tls
    bind 127.0.0.1:$HAPROXY_TLS_PORT ssl crt $WORK/tls/haproxy.pem alpn h2
    default_backend origin"
fi

cat >"$WORK/nginx/nginx.conf" <<EOF
# nginx as a reverse proxy: one worker, pooled keep-alive upstream
# connections, no access log. keepalive_requests is raised on both sides so
# that nginx, like ebb and HAProxy, never closes a busy connection after
# 1000 requests (it also caps requests per HTTP/2 connection).
# proxy_max_temp_file_size 0: a 64 KiB response that does not fit the
# default proxy buffers is streamed, not spooled to disk.
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
        keepalive 256;   # idle connections kept: above the most in flight (h2c: 8 x 16)
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }
    upstream grpc_origin {
        server 127.0.0.1:$GRPC_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
        }
    }$NGINX_H2C_SERVER
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
    maxconn 4096
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
$HAPROXY_H2C_FRONTEND

backend origin
    server origin 127.0.0.1:$ORIGIN_PORT
EOF

# The idle-h1 part holds more connections than the others allow: nginx and
# HAProxy get a copy of their configuration sized for them (not used
# elsewhere: nginx allocates its worker_connections up front, which would
# inflate its peak RSS in the other parts). HAProxy wants two descriptors
# per connection it may hold (client and server side) and by default
# (strict-limits) refuses to start below that; idle client connections
# hold no server connection, so one each is enough: "no strict-limits"
# lets it start with a warning where the hard limit is lower.
WIDE_CONNS=$((IDLE_H1_CONNS + 1024))
sed "s/worker_connections 4096;/worker_connections $WIDE_CONNS;/" "$WORK/nginx/nginx.conf" >"$WORK/nginx/nginx-wide.conf"
sed -e "s/maxconn 4096$/maxconn $WIDE_CONNS/" -e 's/^    nbthread 1$/&\n    no strict-limits/' \
	"$WORK/haproxy/haproxy.cfg" >"$WORK/haproxy/haproxy-wide.cfg"

# start_proxy NAME VARIANT: start it pinned to CPU 0 and check that it
# answers as the variant needs (HTTP/1.1 bodies; h2c; gRPC calls).
start_proxy() {
	local name=$1 v=$2
	[[ $name != direct ]] || return 0
	case $name in
	ebb)
		# limits.max_connections defaults to 20000: enough for idle-h1.
		local conf=$WORK/ebb/ebb.yaml
		[[ ${V_KIND[$v]} != grpc ]] || conf=$WORK/ebb/ebb-grpc.yaml
		taskset -c "$PROXY_CPU" "$WORK/bin/ebb" run -config "$conf" -set admin.pprof=true \
			>"$WORK/ebb/stdout.log" 2>"${LOGF[ebb]}" &
		;;
	base)
		taskset -c "$PROXY_CPU" "$WORK/bin/ebb-base" run -config "$WORK/base/ebb.yaml" \
			>"$WORK/base/stdout.log" 2>"${LOGF[base]}" &
		;;
	ebb-log | ebb-trace100 | ebb-trace1)
		taskset -c "$PROXY_CPU" "$WORK/bin/ebb" run -config "$WORK/$name/ebb.yaml" \
			>"$WORK/$name/stdout.log" 2>"${LOGF[$name]}" &
		;;
	nginx)
		taskset -c "$PROXY_CPU" nginx -p "$WORK/nginx" -e "${LOGF[nginx]}" \
			-c "$WORK/nginx/nginx${V_WIDE[$v]:+-wide}.conf" >"$WORK/nginx/stdout.log" 2>&1 &
		;;
	haproxy)
		# -db: foreground, a single process (no master-worker).
		taskset -c "$PROXY_CPU" haproxy -db -f "$WORK/haproxy/haproxy${V_WIDE[$v]:+-wide}.cfg" \
			>"${LOGF[haproxy]}" 2>&1 &
		;;
	fasthttp)
		taskset -c "$PROXY_CPU" "$WORK/bin/fasthttp-bare" -listen "127.0.0.1:$FASTHTTP_PORT" \
			-origin "127.0.0.1:$ORIGIN_PORT" >"${LOGF[fasthttp]}" 2>&1 &
		;;
	esac
	PID[$name]=$!
	local port
	port=$(target_port "$v" "$name")
	wait_port "$name" "$port" "${LOGF[$name]}"
	case ${V_KIND[$v]} in
	wrk)
		check_body "$name" "$port" / "$SMALL_BYTES"
		check_body "$name" "$port" /64k "$LARGE_BYTES"
		;;
	h2load)
		check_h2c "$name" "$port" / "$SMALL_BYTES" "${V_SCHEME[$v]}"
		check_h2c "$name" "$port" /64k "$LARGE_BYTES" "${V_SCHEME[$v]}"
		;;
	grpc) check_grpc "$name" "$port" ;;
	esac
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
# ")" is dropped first: then utime and stime are words 12 and 13. "direct"
# (no proxy) costs 0.
cpu_ticks() {
	[[ $1 != direct ]] || { echo 0; return; }
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

# target_port VARIANT TARGET: the port the variant's load goes to.
target_port() {
	case ${V_KIND[$1]} in
	wrk) echo "${PORT[$2]}" ;;
	h2load) if [[ ${V_SCHEME[$1]} == https ]]; then echo "${TLS_PORT[$2]}"; else echo "${H2C_PORT[$2]}"; fi ;;
	grpc) echo "${GRPC_TARGET_PORT[$2]}" ;;
	esac
}

# run_load VARIANT TARGET OUTFILE DURATION: one run of the variant's load
# generator, pinned to CPU 1, bounded twice (its own duration and an outer
# timeout in case it hangs).
run_load() {
	local v=$1 p=$2 out=$3 dur=$4 port cmd
	port=$(target_port "$v" "$p")
	case ${V_KIND[$v]} in
	wrk) cmd=(wrk -t1 -c"${V_CONNS[$v]}" -d"${dur}s" --latency "http://127.0.0.1:$port${V_PATH[$v]}") ;;
	h2load)
		# Prior knowledge (an http:// URL); --log-file: one line per request,
		# for the percentiles.
		cmd=(h2load -t1 -c"${V_CONNS[$v]}" -m"${V_STREAMS[$v]}" -D"$dur" --log-file="$out.log"
			"${V_SCHEME[$v]}://127.0.0.1:$port${V_PATH[$v]}")
		;;
	grpc)
		cmd=("$WORK/bin/grpc-bench" -mode client -target "127.0.0.1:$port"
			-duration "${dur}s" -concurrency "${V_CONNS[$v]}")
		;;
	esac
	# ebb-log's access log from the last run goes (truncated in place:
	# ebb appends to it).
	[[ $p != ebb-log ]] || : >"$WORK/ebb-log/access.log"
	timeout --kill-after=5 $((dur + 30)) taskset -c "$LOAD_CPU" "${cmd[@]}" >"$out" 2>&1 ||
		{ cat "$out" >&2; die "${cmd[0]##*/} failed against $p (${V_LABEL[$v]})"; }
}

# Every parse_* prints "rps requests p50_us p99_us non2xx errors".

# parse_wrk FILE
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

# parse_h2load FILE: the summary in FILE, the percentiles from FILE.log
# (tab-separated: start time, status, µs to the end of the response),
# which is then removed (it is large).
parse_h2load() {
	local f=$1 rps reqs non2xx errs pct
	# "finished in 5.00s, 41234.20 req/s, 3.12MB/s"
	rps=$(awk '/^finished in/ { print $4 }' "$f")
	# "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout"
	reqs=$(awk '/^requests:/ { print $6 + 0 }' "$f")
	errs=$(awk '/^requests:/ { print $12 + $14 }' "$f")
	# "status codes: N 2xx, N 3xx, N 4xx, N 5xx"
	non2xx=$(awk '/^status codes:/ { print $5 + $7 + $9 }' "$f")
	[[ -n $rps && -n $reqs && -n $errs && -n $non2xx && -s $f.log ]] || { cat "$f" >&2; die "cannot parse h2load output $f"; }
	[[ $reqs -gt 0 ]] || { cat "$f" >&2; die "h2load completed no request ($f)"; }
	pct=$(cut -f3 "$f.log" | sort -n | awk '{ a[NR] = $1 } END {
		i = int(0.50 * NR + 0.5); j = int(0.99 * NR + 0.5)
		printf "%.1f %.1f", a[i < 1 ? 1 : i], a[j < 1 ? 1 : j] }')
	rm -f "$f.log"
	echo "$rps $reqs $pct $non2xx $errs"
}

# parse_grpc FILE: "requests=N errors=N seconds=S rps=R p50_us=P p99_us=P mean_us=M"
parse_grpc() {
	local f=$1 line
	line=$(grep -E '^requests=' "$f" | tail -n 1) || { cat "$f" >&2; die "cannot parse grpc-bench output $f"; }
	awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); m[kv[1]] = kv[2] }
		print m["rps"], m["requests"], m["p50_us"], m["p99_us"], 0, m["errors"] }' <<<"$line"
}

# parse_load VARIANT FILE
parse_load() {
	case ${V_KIND[$1]} in
	wrk) parse_wrk "$2" ;;
	h2load) parse_h2load "$2" ;;
	grpc) parse_grpc "$2" ;;
	esac
}

# median: the median of the numbers on stdin, one per line.
median() {
	sort -g | awk '{ a[NR] = $1 } END {
		if (NR == 0) { print "NaN"; exit }
		if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2
	}'
}

# Variants: kind (load generator), path, connections (or calls in
# flight), label, targets (the proxies measured, or direct).
read -r -a PROXY_LIST <<<"$PROXIES"
VARIANTS=()
declare -A V_KIND=() V_PATH=() V_CONNS=() V_STREAMS=() V_SCHEME=() V_LABEL=() V_TARGETS=() V_WIDE=()
if has_part h1; then
	VARIANTS+=(small large latency)
	V_KIND+=([small]=wrk [large]=wrk [latency]=wrk)
	V_PATH+=([small]=/ [large]=/64k [latency]=/)
	V_CONNS+=([small]=$CONNS [large]=$CONNS [latency]=1)
	V_LABEL+=(
		[small]="HTTP/1.1, $SMALL_BYTES-byte body, $CONNS connections"
		[large]="HTTP/1.1, 64 KiB body, $CONNS connections"
		[latency]="HTTP/1.1, $SMALL_BYTES-byte body, 1 connection (latency)"
	)
	V_TARGETS+=([small]="${PROXY_LIST[*]}" [large]="${PROXY_LIST[*]}" [latency]="${PROXY_LIST[*]}")
fi
if has_part h2c; then
	t=""
	for p in "${PROXY_LIST[@]}"; do [[ $p == fasthttp ]] || t+=" $p"; done
	[[ -n $t ]] || die "the h2c part needs ebb, nginx or haproxy in PROXIES"
	VARIANTS+=(h2c h2c-wide)
	V_KIND+=([h2c]=h2load [h2c-wide]=h2load)
	V_PATH+=([h2c]=/ [h2c-wide]=/)
	V_SCHEME+=([h2c]=http [h2c-wide]=http)
	V_CONNS+=([h2c]=$H2_CONNS [h2c-wide]=$H2_WIDE_CONNS)
	V_STREAMS+=([h2c]=$H2_STREAMS [h2c-wide]=1)
	V_LABEL[h2c]="h2c, $SMALL_BYTES-byte body, $H2_CONNS connections x $H2_STREAMS streams"
	V_LABEL[h2c-wide]="h2c, $SMALL_BYTES-byte body, $H2_WIDE_CONNS connections x 1 stream"
	V_TARGETS+=([h2c]=${t# } [h2c-wide]=${t# })
fi
if has_part h2tls; then
	t=""
	for p in "${PROXY_LIST[@]}"; do [[ -z ${TLS_PORT[$p]:-} ]] || t+=" $p"; done
	[[ -n $t ]] || die "the h2tls part needs ebb, nginx or haproxy in PROXIES"
	VARIANTS+=(h2tls)
	V_KIND[h2tls]=h2load
	V_PATH[h2tls]=/
	V_SCHEME[h2tls]=https
	V_CONNS[h2tls]=$H2_CONNS
	V_STREAMS[h2tls]=$H2_STREAMS
	V_LABEL[h2tls]="HTTP/2 over TLS, $SMALL_BYTES-byte body, $H2_CONNS connections x $H2_STREAMS streams"
	V_TARGETS[h2tls]=${t# }
fi
if has_part grpc; then
	for c in $GRPC_CONCURRENCY; do
		v=grpc-c$c
		plural=s
		((c > 1)) || plural=""
		VARIANTS+=("$v")
		V_KIND[$v]=grpc
		V_PATH[$v]=/
		V_CONNS[$v]=$c
		V_LABEL[$v]="gRPC unary, $SMALL_BYTES-byte echo, $c call$plural in flight"
		V_TARGETS[$v]=direct
		for p in ebb nginx haproxy; do
			if has_proxy $p; then V_TARGETS[$v]+=" $p"; fi
		done
	done
fi

RUNS=$WORK/runs.tsv # one line per measured run
printf 'variant\tround\tproxy\trps\trequests\tcpu_ticks\tcpu_us_per_req\tp50_us\tp99_us\tnon2xx\tsocket_errors\tcpu0_other_pct\n' >"$RUNS"
declare -A RSS=() # variant,proxy -> VmHWM kB
ERRORS=()         # runs with non-2xx responses or errors

# steal_ticks: CPU time the hypervisor took from this machine, all CPUs
# (field 9 of the "cpu" line of /proc/stat). A virtual machine with much
# steal during the run gives slow and noisy figures.
steal_ticks() { awk '$1 == "cpu" { print $9 }' /proc/stat; }
STEAL0=$(steal_ticks)
T0=$(date +%s)
has_tracing && start_sinks
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$BENCH_DIR/results"
PROFILE_FILE=""

# profile_ebb VARIANT: one more h2load run against ebb (not measured), with
# a CPU profile of DURATION seconds taken through ebb's admin server while
# it runs, then ebb's allocation profile (since its start: this variant).
# Summaries go to results/<stamp>-ebb-h2c-profile.txt, the raw profiles
# beside it.
profile_ebb() {
	local v=$1 port base
	port=$(target_port "$v" ebb)
	base=$BENCH_DIR/results/$STAMP-ebb-$v
	log "  profiling ebb: ${DURATION}s CPU profile under h2load, then allocations"
	timeout --kill-after=5 $((DURATION + 32)) taskset -c "$LOAD_CPU" \
		h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" -D$((DURATION + 2)) "http://127.0.0.1:$port${V_PATH[$v]}" \
		>"$WORK/profile-h2load.txt" 2>&1 &
	PID[profile-load]=$!
	sleep 1
	curl -sS --max-time $((DURATION + 20)) -o "$base-cpu.pprof" \
		"http://127.0.0.1:$EBB_ADMIN_PORT/debug/pprof/profile?seconds=$DURATION" || die "cannot fetch ebb's CPU profile"
	wait "${PID[profile-load]}" || { cat "$WORK/profile-h2load.txt" >&2; die "h2load failed during the profile"; }
	unset "PID[profile-load]"
	curl -sS --max-time 10 -o "$base-allocs.pprof" \
		"http://127.0.0.1:$EBB_ADMIN_PORT/debug/pprof/allocs" || die "cannot fetch ebb's allocation profile"
	PROFILE_FILE=$base-profile.txt
	{
		echo "# ebb $EBB_COMMIT$EBB_DIRTY under ${V_LABEL[$v]} (h2load -c$H2_CONNS -m$H2_STREAMS), $STAMP"
		echo "# $(grep -E '^finished in' "$WORK/profile-h2load.txt")"
		echo
		echo "## CPU, by cumulative time"
		go tool pprof -top -cum -nodecount=40 "$WORK/bin/ebb" "$base-cpu.pprof" 2>/dev/null
		echo
		echo "## CPU, by flat time"
		go tool pprof -top -nodecount=40 "$WORK/bin/ebb" "$base-cpu.pprof" 2>/dev/null
		echo
		echo "## Allocations (alloc_space, since ebb started for this variant)"
		go tool pprof -top -sample_index=alloc_space -nodecount=25 "$WORK/bin/ebb" "$base-allocs.pprof" 2>/dev/null
	} >"$PROFILE_FILE"
	log "  profile summary: $PROFILE_FILE"
}

# measure_run VARIANT ROUND TARGET: one measured run of the variant's load
# against TARGET, its figures appended to runs.tsv.
measure_run() {
	local v=$1 r=$2 p=$3 out t0 t1 c0 c1 res rps reqs p50 p99 non2xx errs ticks cpu_us other
	out=$WORK/load-$v-$p-$r.txt
	t0=$(cpu_ticks "$p")
	c0=$(cpu0_ticks)
	run_load "$v" "$p" "$out" "$DURATION"
	t1=$(cpu_ticks "$p")
	c1=$(cpu0_ticks)
	res=$(parse_load "$v" "$out")
	read -r rps reqs p50 p99 non2xx errs <<<"$res"
	ticks=$((t1 - t0))
	if [[ $p == direct ]]; then
		cpu_us=NaN
	else
		cpu_us=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
	fi
	other=$(awk -v o="$((c1 - c0 - ticks))" -v hz="$CLK_TCK" -v d="$DURATION" \
		'BEGIN { if (o < 0) o = 0; printf "%.1f", 100 * o / hz / d }')
	printf '%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
		"$v" "$((r + 1))" "$p" "$rps" "$reqs" "$ticks" "$cpu_us" "$p50" "$p99" "$non2xx" "$errs" "$other" >>"$RUNS"
	log "  round $((r + 1))/$ROUNDS $p: $rps req/s, $cpu_us µs CPU/req, p50 ${p50} µs, p99 ${p99} µs, others on CPU $PROXY_CPU: ${other}%"
	if [[ $non2xx != 0 || $errs != 0 ]]; then
		ERRORS+=("$v round $((r + 1)) $p: $non2xx non-2xx responses, $errs errors")
		log "  WARNING: $p: $non2xx non-2xx responses, $errs errors (output: $out)"
	fi
}

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
	read -r -a TARGETS <<<"${V_TARGETS[$v]}"
	NT=${#TARGETS[@]}
	if [[ ${V_KIND[$v]} == grpc && -z ${PID[grpc-server]:-} ]]; then start_grpc_server; fi
	# Fresh proxies for each variant, so that the peak RSS is this variant's.
	for p in "${TARGETS[@]}"; do start_proxy "$p" "$v"; done
	if ((WARMUP > 0)); then
		for p in "${TARGETS[@]}"; do
			log "  warm-up $p (${WARMUP}s)"
			run_load "$v" "$p" "$WORK/warmup-$v-$p.txt" "$WARMUP"
			rm -f "$WORK/warmup-$v-$p.txt.log"
		done
	fi
	for ((r = 0; r < ROUNDS; r++)); do
		# Rotate the order each round: round r starts with target r mod NT.
		for ((i = 0; i < NT; i++)); do
			measure_run "$v" "$r" "${TARGETS[$(((r + i) % NT))]}"
		done
	done
	for p in "${TARGETS[@]}"; do
		[[ $p != direct ]] || continue
		RSS[$v,$p]=$(peak_rss_kb "$p")
	done
	if [[ $PROFILE == 1 && $v == h2c && " ${V_TARGETS[$v]} " == *" ebb "* ]]; then
		profile_ebb "$v"
	fi
	for p in "${TARGETS[@]}"; do stop_pid "$p"; done
done
stop_pid grpc-server
stop_sinks

# The idle parts: each proxy, fresh, gets connections that make one
# request each and then stay open (idle: IDLE_CONNS over h2c; idle-h1:
# IDLE_H1_CONNS over HTTP/1.1 keep-alive); what they cost is the growth of
# its VmRSS (nginx: the worker's).
declare -A IDLE_BEFORE=() IDLE_AFTER=() # part,proxy -> VmRSS kB

# vmrss_kb PID
vmrss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# measure_idle PART PROXY PROTO PORT CONNS: start PROXY for PART, have
# bench/idle-h2 -proto PROTO open CONNS connections to PORT, read the
# VmRSS before and with them, then check that the proxy still held every
# one of them.
measure_idle() {
	local part=$1 p=$2 proto=$3 port=$4 n=$5 w out i held
	start_proxy "$p" "$part"
	w=$(worker_pid "$p")
	IDLE_BEFORE[$part,$p]=$(vmrss_kb "$w")
	out=$WORK/$part-$p.txt
	# -hold is a bound: stop_pid below ends the hold.
	timeout --kill-after=5 300 taskset -c "$LOAD_CPU" "$WORK/bin/idle-h2" -proto "$proto" \
		-target "127.0.0.1:$port" -conns "$n" -hold 240s >"$out" 2>&1 &
	PID[idle-load]=$!
	await_ready idle-load "$out" 120 || { cat "$out" >&2; die "idle-h2 could not open $n $proto connections to $p"; }
	sleep 1 # let the proxy finish with the last answers
	IDLE_AFTER[$part,$p]=$(vmrss_kb "$w")
	stop_pid idle-load # on SIGTERM idle-h2 counts the connections still open, then closes them
	held=$(awk '$1 == "alive" { print $2 }' "$out")
	log "  $p: VmRSS ${IDLE_BEFORE[$part,$p]} kB, then ${IDLE_AFTER[$part,$p]} kB; ${held:-?} of $n connections still open at the end"
	if [[ $held != "$n" ]]; then
		ERRORS+=("$part $p: ${held:-?} of $n idle connections were still open after the measurement (it undercounts)")
	fi
	stop_pid "$p"
}

IDLE_TARGETS=()
if has_part idle; then
	for p in "${PROXY_LIST[@]}"; do [[ -z ${TLS_PORT[$p]:-} ]] || IDLE_TARGETS+=("$p"); done
	((${#IDLE_TARGETS[@]} > 0)) || die "the idle part needs ebb, nginx or haproxy in PROXIES"
	V_KIND[idle]=h2load
	V_SCHEME[idle]=http
	for p in "${IDLE_TARGETS[@]}"; do
		log "idle: $IDLE_CONNS idle HTTP/2 connections to $p"
		measure_idle idle "$p" h2c "${H2C_PORT[$p]}" "$IDLE_CONNS"
	done
fi
IDLE_H1_TARGETS=()
if has_part idle-h1; then
	for p in "${PROXY_LIST[@]}"; do is_ebb_kind "$p" || IDLE_H1_TARGETS+=("$p"); done
	V_KIND[idle-h1]=wrk
	V_WIDE[idle-h1]=1 # nginx and HAProxy sized for IDLE_H1_CONNS
	for p in "${IDLE_H1_TARGETS[@]}"; do
		log "idle-h1: $IDLE_H1_CONNS idle HTTP/1.1 keep-alive connections to $p"
		measure_idle idle-h1 "$p" h1 "${PORT[$p]}" "$IDLE_H1_CONNS"
	done
fi

# The slowloris part. Each round, for each proxy in turn: a wrk run alone
# (variant slow-base), then bench/slowloris opens SLOW_CONNS slow
# connections and, once they are all open, the same wrk run again
# (slow-attack); the attack lasts SLOW_HOLD seconds from its start, and its
# summary says how many connections the proxy still held at the end.
SLOW_TARGETS=()
SLOW=$WORK/slowloris.tsv # one line per attack
printf 'round\tproxy\topened\topen\theads_open\tbodies_open\theads_cut_p50_s\tbodies_cut_p50_s\tanswers\n' >"$SLOW"

# slow_attack ROUND PROXY
slow_attack() {
	local r=$1 p=$2 out i opened line
	out=$WORK/slowloris-$p-$r.txt
	timeout --kill-after=5 $((SLOW_HOLD + 30)) taskset -c "$LOAD_CPU" "$WORK/bin/slowloris" \
		-target "127.0.0.1:${PORT[$p]}" -conns "$SLOW_CONNS" -duration "${SLOW_HOLD}s" -path /slow >"$out" 2>&1 &
	PID[slowloris]=$!
	await_ready slowloris "$out" 30 || { cat "$out" >&2; die "slowloris did not get going against $p"; }
	opened=$(sed -n 's/^ready opened=\([0-9]*\).*/\1/p' "$out")
	if [[ $opened != "$SLOW_CONNS" ]]; then
		ERRORS+=("slowloris round $((r + 1)) $p: ${opened:-?} of $SLOW_CONNS attack connections opened")
	fi
	measure_run slow-attack "$r" "$p"
	wait "${PID[slowloris]}" || { cat "$out" >&2; die "slowloris failed against $p"; }
	unset "PID[slowloris]"
	line=$(grep '^conns=' "$out") || { cat "$out" >&2; die "cannot parse slowloris output $out"; }
	awk -v r="$((r + 1))" -v p="$p" '{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); m[kv[1]] = kv[2] }
		printf "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r, p, m["headers"] + m["bodies"], m["open"],
			m["headers_open"], m["bodies_open"], m["headers_cut_p50_s"], m["bodies_cut_p50_s"], m["answers"]
	}' <<<"$line" >>"$SLOW"
	log "  $p under attack: $(tail -n 1 "$SLOW" | awk -F'\t' '{ printf "%d of %d slow connections open after %s s (heads %d, bodies %d); cut after %s s (heads), %s s (bodies) at the median; answers %s", $4, $3, s, $5, $6, $7, $8, $9 }' s="$SLOW_HOLD")"
}

if has_part slowloris; then
	for p in "${PROXY_LIST[@]}"; do [[ -z ${TLS_PORT[$p]:-} && $p != base ]] || SLOW_TARGETS+=("$p"); done
	((${#SLOW_TARGETS[@]} > 0)) || die "the slowloris part needs ebb, nginx or haproxy in PROXIES"
	V_KIND+=([slowloris]=wrk [slow-base]=wrk [slow-attack]=wrk)
	V_PATH+=([slow-base]=/ [slow-attack]=/)
	V_CONNS+=([slow-base]=$SLOW_CLIENT_CONNS [slow-attack]=$SLOW_CLIENT_CONNS)
	V_LABEL[slow-base]="HTTP/1.1, $SMALL_BYTES-byte body, $SLOW_CLIENT_CONNS connections, alone"
	V_LABEL[slow-attack]="HTTP/1.1, $SMALL_BYTES-byte body, $SLOW_CLIENT_CONNS connections, with $SLOW_CONNS slow connections"
	log "slowloris: $SLOW_CONNS slow connections for ${SLOW_HOLD}s against each of ${SLOW_TARGETS[*]}"
	for p in "${SLOW_TARGETS[@]}"; do start_proxy "$p" slowloris; done
	if ((WARMUP > 0)); then
		for p in "${SLOW_TARGETS[@]}"; do
			log "  warm-up $p (${WARMUP}s)"
			run_load slow-base "$p" "$WORK/warmup-slowloris-$p.txt" "$WARMUP"
		done
	fi
	NT=${#SLOW_TARGETS[@]}
	for ((r = 0; r < ROUNDS; r++)); do
		for ((i = 0; i < NT; i++)); do
			p=${SLOW_TARGETS[$(((r + i) % NT))]}
			measure_run slow-base "$r" "$p"
			slow_attack "$r" "$p"
		done
	done
	for p in "${SLOW_TARGETS[@]}"; do stop_pid "$p"; done
fi

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

STEAL=$(awk -v s="$(($(steal_ticks) - STEAL0))" -v hz="$CLK_TCK" -v t="$(($(date +%s) - T0))" -v n="$(nproc --all)" \
	'BEGIN { printf "%.1f%%", (t > 0) ? 100 * s / hz / (t * n) : 0 }')

# Other processes' share of the proxy's CPU over the measured runs.
OTHER_MED=$(awk -F'\t' 'NR > 1 { print $12 }' "$RUNS" | median)
OTHER_MAX=$(awk -F'\t' 'NR > 1 && $12 > m { m = $12 } END { print m + 0 }' "$RUNS")

REPORT=$BENCH_DIR/results/$STAMP.md

# col VARIANT PROXY COLUMN: the median of one column of runs.tsv.
col() {
	awk -F'\t' -v v="$1" -v p="$2" -v c="$3" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
		$1 == v && $3 == p { print $k }' "$RUNS" | median
}

# has_target VARIANT TARGET
has_target() { [[ " ${V_TARGETS[$1]:-} " == *" $2 "* ]]; }

# ratio A B: A/B to two decimals, "–" if B is missing.
ratio() { awk -v a="$1" -v b="${2:-}" 'BEGIN { if (b == "" || b + 0 == 0) print "–"; else printf "%.2f", a / b }'; }

# fmt_us µs: 123.4 -> "123 µs", 1234.5 -> "1.23 ms".
fmt_us() { awk -v x="$1" 'BEGIN { if (x >= 1000) printf "%.2f ms", x / 1000; else printf "%.0f µs", x }'; }

# fmt_rss VARIANT PROXY: peak RSS in MiB, "–" for direct.
fmt_rss() {
	local k=${RSS[$1,$2]:-}
	if [[ -z $k ]]; then echo "–"; else awk -v k="$k" 'BEGIN { printf "%.1f MiB", k / 1024 }'; fi
}

# slow_col PROXY COLUMN: the median of a column of slowloris.tsv, NaN
# (nothing cut) left out.
slow_col() {
	awk -F'\t' -v p="$1" -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
		$2 == p && $k != "NaN" { print $k }' "$SLOW" | median
}

# fmt_s SECONDS: "10.2 s", "–" for NaN.
fmt_s() { awk -v x="$1" 'BEGIN { if (x == "NaN") print "–"; else printf "%.1f s", x }'; }

# headline VARIANT: ebb's ratios against nginx and HAProxy (and fasthttp-bare).
headline() {
	local v=$1 o name
	for o in nginx haproxy fasthttp base; do
		has_target "$v" "$o" || continue
		case $o in nginx) name=nginx ;; haproxy) name=HAProxy ;; fasthttp) name=fasthttp-bare ;; base) name="base ($BASE_COMMIT)" ;; esac
		# µs CPU/req: above 1, ebb costs more.
		echo "ebb/$name: $(ratio "$(col "$v" ebb rps)" "$(col "$v" "$o" rps)") in req/s, $(ratio "$(col "$v" ebb cpu_us_per_req)" "$(col "$v" "$o" cpu_us_per_req)") in µs CPU/req  "
	done
	local k what
	for k in "${EBB_KINDS[@]}"; do
		has_target "$v" "$k" || continue
		case $k in ebb-log) what="the access log's cost" ;; ebb-trace100) what="tracing at 100 %" ;; ebb-trace1) what="tracing at 1 %" ;; esac
		echo "$k/ebb ($what): $(ratio "$(col "$v" "$k" rps)" "$(col "$v" ebb rps)") in req/s, $(ratio "$(col "$v" "$k" cpu_us_per_req)" "$(col "$v" ebb cpu_us_per_req)") in µs CPU/req  "
	done
}

ORIGINS="nginx"
has_part grpc && ORIGINS+="; the gRPC server for gRPC"
LOADGENS="\`taskset -c $LOAD_CPU wrk -t1\`"
has_part h2c && LOADGENS+=", \`h2load -t1 -c$H2_CONNS -m$H2_STREAMS\` and \`-c$H2_WIDE_CONNS -m1\`"
has_part h2tls && LOADGENS+=", \`h2load -t1 -c$H2_CONNS -m$H2_STREAMS https://\`"
if has_part idle || has_part idle-h1; then LOADGENS+=", bench/idle-h2"; fi
has_part slowloris && LOADGENS+=", bench/slowloris"
has_part grpc && LOADGENS+=", the gRPC client"
{
	echo "# ebb benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo
	echo "- ebb $EBB_COMMIT$EBB_DIRTY, $(go version | awk '{ print $3 }')"
	has_proxy base && echo "- base: ebb built from $BASE ($BASE_COMMIT)"
	# (wrk -v exits 1.)
	tools="$(nginx -v 2>&1 | sed 's/^nginx version: //'), wrk $({ wrk -v 2>&1 || true; } | awk 'NR == 1 { print $2 }')"
	has_proxy haproxy && tools+=", HAProxy $(haproxy -v | awk 'NR == 1 { print $3 }')"
	has_part h2c && tools+=", h2load $(h2load --version | awk '{ print $2 }')"
	has_part grpc && tools+=", grpc-go $(go version -m "$WORK/bin/grpc-bench" | awk '$2 == "google.golang.org/grpc" { print $3 }')"
	echo "- $tools"
	echo "- $(nproc --all) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), kernel $(uname -r)"
	echo "- proxy on CPU $PROXY_CPU; origin ($ORIGINS) and $LOADGENS on CPU $LOAD_CPU"
	echo "- parts: $PARTS_RUN; ${DURATION}s per run, $ROUNDS interleaved rounds, ${WARMUP}s warm-up; figures are medians over rounds"
	if [[ $OTHER_MED != NaN ]]; then
		echo "- other processes on CPU $PROXY_CPU during the measured runs: median $OTHER_MED%, max $OTHER_MAX%"
	fi
	if awk -v m="$OTHER_MAX" 'BEGIN { exit !(m > 5) }'; then
		echo "- **warning: the machine was not quiet; req/s and latency are disturbed (µs CPU/req less so)**"
	fi
	echo "- calibration, wrk straight to the origin ($SMALL_BYTES B, $CONNS conns, wrk on CPU $PROXY_CPU): $CALIB_RPS req/s; CPU steal during the run: $STEAL"
	echo "- µs CPU/req: the proxy's utime+stime during the run over the requests completed; peak RSS: VmHWM (nginx: worker) after the variant"
	for v in "${VARIANTS[@]}"; do
		echo
		echo "## ${V_LABEL[$v]}"
		echo
		if [[ ${V_KIND[$v]} == grpc ]]; then
			echo "| path | calls/s | vs direct | µs CPU/call | p50 | p99 | peak RSS |"
			echo "|---|---:|---:|---:|---:|---:|---:|"
			dir=$(col "$v" direct rps)
			for p in direct ebb nginx haproxy; do
				has_target "$v" "$p" || continue
				cpu=$(col "$v" "$p" cpu_us_per_req)
				[[ $p == direct ]] && cpu="–" || cpu=$(printf '%.2f' "$cpu")
				printf '| %s | %.0f | %s | %s | %s | %s | %s |\n' \
					"$([[ $p == direct ]] && echo direct || echo "through $p")" "$(col "$v" "$p" rps)" \
					"$(ratio "$(col "$v" "$p" rps)" "$dir")" "$cpu" \
					"$(fmt_us "$(col "$v" "$p" p50_us)")" "$(fmt_us "$(col "$v" "$p" p99_us)")" "$(fmt_rss "$v" "$p")"
			done
			echo
			for p in ebb nginx haproxy; do
				has_target "$v" "$p" || continue
				awk -v p="$p" -v a="$(col "$v" "$p" p50_us)" -v b="$(col "$v" direct p50_us)" \
					-v c="$(col "$v" "$p" p99_us)" -v d="$(col "$v" direct p99_us)" \
					'BEGIN { printf "%s adds %+.0f µs at p50, %+.0f µs at p99.  \n", p, a - b, c - d }'
			done
			continue
		fi
		echo "| proxy | req/s | vs nginx | vs HAProxy | µs CPU/req | p50 | p99 | peak RSS |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|"
		ngx=""
		hap=""
		if has_target "$v" nginx; then ngx=$(col "$v" nginx rps); fi
		if has_target "$v" haproxy; then hap=$(col "$v" haproxy rps); fi
		read -r -a TARGETS <<<"${V_TARGETS[$v]}"
		for p in "${TARGETS[@]}"; do
			rps=$(col "$v" "$p" rps)
			printf '| %s | %.0f | %s | %s | %.2f | %s | %s | %s |\n' \
				"$p" "$rps" "$(ratio "$rps" "$ngx")" "$(ratio "$rps" "$hap")" \
				"$(col "$v" "$p" cpu_us_per_req)" "$(fmt_us "$(col "$v" "$p" p50_us)")" \
				"$(fmt_us "$(col "$v" "$p" p99_us)")" "$(fmt_rss "$v" "$p")"
		done
	done
	if has_proxy ebb; then
		if has_part h1; then
			echo
			echo "## Headline, ${V_LABEL[small]}"
			echo
			headline small
		fi
		for v in h2c h2c-wide h2tls; do
			[[ -n ${V_LABEL[$v]:-} ]] || continue
			echo
			echo "## Headline, ${V_LABEL[$v]}"
			echo
			headline "$v"
		done
		if [[ -n $PROFILE_FILE ]]; then
			echo
			echo "ebb's CPU and allocation profile under the h2c load: \`results/$(basename "$PROFILE_FILE")\`."
		fi
	fi
	if ((${#SPANS[@]} > 0)); then
		echo
		echo "## Spans exported"
		echo
		echo "A sampled request makes two spans (server, client). The batch span processor drops what its queue has no room for."
		echo
		for p in ebb-trace100 ebb-trace1; do
			[[ -n ${SPANS[$p]:-} ]] || continue
			reqs=$(awk -F'\t' -v p="$p" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "requests") k = i; next }
				$3 == p { n += $k } END { printf "%d", n }' "$RUNS")
			echo "- $p: ${SPANS[$p]} spans reached bench/otlp-sink over all its runs (warm-ups and checks included), for $reqs requests in its measured runs"
		done
	fi
	for part in idle idle-h1; do
		if [[ $part == idle ]]; then
			targets=("${IDLE_TARGETS[@]}") n=$IDLE_CONNS
			title="Memory per idle HTTP/2 connection, $IDLE_CONNS connections (bench/idle-h2)"
		else
			targets=("${IDLE_H1_TARGETS[@]}") n=$IDLE_H1_CONNS
			title="Memory per idle HTTP/1.1 keep-alive connection, $IDLE_H1_CONNS connections (bench/idle-h2 -proto h1)"
		fi
		((${#targets[@]} > 0)) || continue
		echo
		echo "## $title"
		echo
		echo "| proxy | VmRSS before | with the connections | per connection |"
		echo "|---|---:|---:|---:|"
		for p in "${targets[@]}"; do
			awk -v p="$p" -v a="${IDLE_BEFORE[$part,$p]}" -v b="${IDLE_AFTER[$part,$p]}" -v n="$n" \
				'BEGIN { printf "| %s | %.1f MiB | %.1f MiB | %.1f KiB |\n", p, a / 1024, b / 1024, (b - a) / n }'
		done
	done
	if ((${#SLOW_TARGETS[@]} > 0)); then
		echo
		echo "## Slowloris: $SLOW_CONNS slow connections for ${SLOW_HOLD}s, a client at $SLOW_CLIENT_CONNS connections (bench/slowloris, wrk)"
		echo
		echo "Half the slow connections send a request head a header line every 5 s and never end it, half a POST body (Content-Length: 65536) a byte a second. The client's latency alone, then during the attack's first ${DURATION}s; the slow connections the proxy still held when the attack ended (of those opened), and when it cut the others (median, seconds after they opened)."
		echo
		echo "| proxy | req/s alone | req/s attacked | p99 alone | p99 attacked | slow conns open at ${SLOW_HOLD}s | heads cut after | bodies cut after | answers to the attack (last round) |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
		for p in "${SLOW_TARGETS[@]}"; do
			printf '| %s | %.0f | %.0f | %s | %s | %s of %s | %s | %s | %s |\n' "$p" \
				"$(col slow-base "$p" rps)" "$(col slow-attack "$p" rps)" \
				"$(fmt_us "$(col slow-base "$p" p99_us)")" "$(fmt_us "$(col slow-attack "$p" p99_us)")" \
				"$(slow_col "$p" open)" "$(slow_col "$p" opened)" \
				"$(fmt_s "$(slow_col "$p" heads_cut_p50_s)")" "$(fmt_s "$(slow_col "$p" bodies_cut_p50_s)")" \
				"$(awk -F'\t' -v p="$p" '$2 == p { a = $9 } END { gsub(",", ", ", a); print a }' "$SLOW")"
		done
	fi
	echo
	echo "## Errors"
	echo
	if ((${#ERRORS[@]} == 0)); then
		echo "The load generators reported no non-2xx responses and no errors."
	else
		for e in "${ERRORS[@]}"; do echo "- $e"; done
	fi
	if (($(wc -l <"$RUNS") > 1)); then
		echo
		echo "## Raw runs"
		echo
		echo '```'
		column -t -s $'\t' "$RUNS" 2>/dev/null || cat "$RUNS"
		echo '```'
	fi
	if ((${#SLOW_TARGETS[@]} > 0)); then
		echo
		echo "Slowloris attacks (open: slow connections still open at the end; cut times: medians, seconds after they opened):"
		echo
		echo '```'
		column -t -s $'\t' "$SLOW" 2>/dev/null || cat "$SLOW"
		echo '```'
	fi
} >"$REPORT"

cat "$REPORT"
log "report written to $REPORT"
