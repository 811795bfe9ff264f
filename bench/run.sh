#!/usr/bin/env bash
# bench/run.sh: ebb against nginx and HAProxy as reverse proxies, over
# HTTP/1.1 and HTTP/2 (h2c), and ebb in front of a gRPC server.
#
# One run measures up to nine parts, each of one or more variants, with
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
#   h2up  h2load as in h2c, but h2c from the proxy to the origin too (an h2c
#         listener of the origin nginx); ebb (protocol: h2c), nginx
#         (grpc_pass), HAProxy (proto h2 server); not in the default PARTS
#   idle  memory per idle HTTP/2 connection: bench/idle-h2 opens IDLE_CONNS
#         h2c connections, one request each, and holds them; the proxy's
#         VmRSS before and after, over the connections
#   idle-h1  the same over HTTP/1.1 keep-alive (bench/idle-h2 -proto h1),
#         IDLE_H1_CONNS connections; every proxy that speaks HTTP/1.1
#   idle-up  memory per idle upstream HTTP/2 connection: bench/idle-h2
#         -inflight has IDLE_UP_CONNS requests in flight at once (100
#         streams per connection) through the proxy to an h2c origin
#         (bench/idle-h2 -origin) that allows one stream per connection and
#         holds every request until all are in flight: the proxy opens
#         IDLE_UP_CONNS connections to it, which then sit idle; the proxy's
#         VmRSS before and after, over the connections, which the origin
#         counts; ebb (protocol: h2c), nginx (grpc_pass), HAProxy (proto h2
#         server); not in the default PARTS
#   slowloris  a normal client's latency (wrk, SLOW_CLIENT_CONNS
#         connections) without and then during an attack of SLOW_CONNS slow
#         connections (bench/slowloris: heads that never end, POST bodies a
#         byte a second), and how many of those the proxy still holds after
#         SLOW_HOLD seconds; ebb, nginx, HAProxy; not in the default PARTS
#   grpc  unary gRPC calls (bench/grpc-bench) straight to a Go gRPC server
#         ("direct") and through ebb (protocol: h2c upstream), nginx
#         (grpc_pass) and HAProxy (proto h2 server)
#   openloop  the load a sidecar sees: an open-loop load at fixed rates
#         (bench/latseries -rate; OPENLOOP_RATES), HTTP/1.1 over
#         OPENLOOP_CONNS keep-alive connections and h2c over one, without
#         and with a busy loop beside the proxy on its CPU
#         (OPENLOOP_NEIGHBOUR); the proxy's CPU time, system calls and
#         context switches (perf stat; OPENLOOP_PERF=0: without) per
#         request, p50/p90/p99; ebb, ebb-log,
#         nginx, HAProxy (and base); not in the default PARTS
#
# Layout (2 CPUs):
#   CPU 0: the proxy under test (all of a variant's proxies run, only the
#          one being measured gets traffic)
#   CPU 1: the origin (nginx; the gRPC server for grpc) and the load
#          generator (wrk, h2load or the gRPC client)
#
# Knobs (environment): PARTS, DURATION, ROUNDS, WARMUP, PROXIES, BASE,
# PROFILE, KEEP_WORK, the sizes of each part's load and the ports: the
# table in bench/README.md gives each one's default and meaning.
#
# This script orchestrates: it builds, starts, pins, loads and stops the
# processes (every one by PID, however the script ends) and reads their
# CPU time and memory from /proc. bench/harness writes the configurations,
# parses each run's output and renders the report.
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
IDLE_UP_CONNS=${IDLE_UP_CONNS:-1000}
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
ORIGIN_H2C_PORT=${ORIGIN_H2C_PORT:-18107}
NGINX_H2UP_PORT=${NGINX_H2UP_PORT:-18108}
HAPROXY_H2UP_PORT=${HAPROXY_H2UP_PORT:-18109}
ORIGIN_IDLEUP_PORT=${ORIGIN_IDLEUP_PORT:-18110}
EBB_ADMIN_PORT=${EBB_ADMIN_PORT:-18089}
KEEP_WORK=${KEEP_WORK:-0}
OPENLOOP_RATES=${OPENLOOP_RATES:-"1000 2000 5000"}
OPENLOOP_PROTOS=${OPENLOOP_PROTOS:-"h1 h2c"}
OPENLOOP_CONNS=${OPENLOOP_CONNS:-64}
OPENLOOP_NEIGHBOUR=${OPENLOOP_NEIGHBOUR:-both}
OPENLOOP_PERF=${OPENLOOP_PERF:-1}
EBB_GOMAXPROCS=${EBB_GOMAXPROCS:-}
BASE_GOMAXPROCS=${BASE_GOMAXPROCS:-}

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

for knob in EBB_GOMAXPROCS BASE_GOMAXPROCS; do
	[[ -z ${!knob} || ${!knob} =~ ^[1-9][0-9]*$ ]] || die "$knob must be a positive integer (the ebb process's GOMAXPROCS), or empty for the runtime's default"
done
declare -A WANT_PART=()
for part in ${PARTS//,/ }; do
	case $part in h1 | h2c | h2tls | h2up | idle | idle-h1 | idle-up | grpc | slowloris | openloop) WANT_PART[$part]=1 ;; *) die "unknown part '$part' in PARTS (h1, h2c, h2tls, h2up, idle, idle-h1, idle-up, grpc, slowloris, openloop)" ;; esac
done
((${#WANT_PART[@]} > 0)) || die "PARTS names no part"
has_part() { [[ -n ${WANT_PART[$1]:-} ]]; }
PARTS_RUN=""
for part in h1 h2c h2tls h2up idle idle-h1 idle-up grpc slowloris openloop; do
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
if has_part h2c || has_part h2tls || has_part h2up; then TOOLS+=(h2load); fi
has_part h2tls && TOOLS+=(openssl)
if has_part openloop && [[ $OPENLOOP_PERF == 1 ]]; then TOOLS+=(perf); fi
for tool in "${TOOLS[@]}"; do
	command -v "$tool" >/dev/null || die "$tool not found in PATH"
done
[[ $(nproc --all) -ge 2 ]] || die "needs at least 2 CPUs (proxy on CPU $PROXY_CPU, load on CPU $LOAD_CPU)"
for knob in DURATION ROUNDS H2_CONNS H2_STREAMS H2_WIDE_CONNS IDLE_CONNS IDLE_H1_CONNS IDLE_UP_CONNS SLOW_CONNS SLOW_HOLD SLOW_CLIENT_CONNS OPENLOOP_CONNS; do
	[[ ${!knob} =~ ^[0-9]+$ && ${!knob} -gt 0 ]] || die "$knob must be a positive integer"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer"
if has_part openloop; then
	[[ -n ${OPENLOOP_RATES// /} ]] || die "OPENLOOP_RATES names no rate"
	for r in $OPENLOOP_RATES; do
		[[ $r =~ ^[0-9]+$ && $r -gt 0 ]] || die "OPENLOOP_RATES must be positive integers (requests a second)"
	done
	[[ -n ${OPENLOOP_PROTOS// /} ]] || die "OPENLOOP_PROTOS names no protocol"
	for r in $OPENLOOP_PROTOS; do
		[[ $r == h1 || $r == h2c ]] || die "OPENLOOP_PROTOS: '$r' is not h1 or h2c"
	done
	case $OPENLOOP_NEIGHBOUR in off | on | both) ;; *) die "OPENLOOP_NEIGHBOUR must be off, on or both" ;; esac
	[[ $OPENLOOP_PERF == 0 || $OPENLOOP_PERF == 1 ]] || die "OPENLOOP_PERF must be 0 or 1"
	# perf must count the two events on another process; fail now, not
	# after the build and the other parts (perf_event_paranoid, a
	# kernel without tracepoints, a container without perf_event_open).
	if [[ $OPENLOOP_PERF == 1 ]]; then
		perf stat -x, -e raw_syscalls:sys_enter,context-switches -o /dev/null -- true 2>/dev/null ||
			die "perf stat -e raw_syscalls:sys_enter,context-switches does not work here (the openloop part needs it, or OPENLOOP_PERF=0; perf_event_paranoid, or run as root)"
	fi
fi
# The client's run under attack starts once the slow connections are open
# (a second or two) and must end before the attack does.
if has_part slowloris && ((SLOW_HOLD < DURATION + 5)); then
	die "SLOW_HOLD ($SLOW_HOLD s) must be at least DURATION + 5 ($((DURATION + 5)) s)"
fi

# idle-up's client: 100 streams per connection, under every proxy's
# per-connection limit (HAProxy's tune.h2.max-concurrent-streams, 100;
# nginx's http2_max_concurrent_streams, 128; ebb's 250): every request in
# flight at once on few client connections, the same ones for every proxy.
IDLE_UP_STREAMS=100
IDLE_UP_CLIENTS=$(((IDLE_UP_CONNS + IDLE_UP_STREAMS - 1) / IDLE_UP_STREAMS))

# Open files: the most connections a part holds, plus room for the
# upstream connections, listeners and logs. The load tools and the proxies
# inherit the limit (HAProxy raises its own from maxconn; Go raises its
# soft limit to the hard one). Above the hard limit only root may go.
MOST_CONNS=$CONNS
if has_part idle && ((IDLE_CONNS > MOST_CONNS)); then MOST_CONNS=$IDLE_CONNS; fi
if has_part idle-h1 && ((IDLE_H1_CONNS > MOST_CONNS)); then MOST_CONNS=$IDLE_H1_CONNS; fi
if has_part idle-up && ((IDLE_UP_CONNS + IDLE_UP_CLIENTS > MOST_CONNS)); then MOST_CONNS=$((IDLE_UP_CONNS + IDLE_UP_CLIENTS)); fi
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

# bench/harness: the configurations, the parsing of every run, the report.
(cd "$REPO_DIR" && go build -o "$WORK/bin/harness" ./bench/harness) || die "go build ./bench/harness failed"
HARNESS=$WORK/bin/harness
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
if has_part idle || has_part idle-h1 || has_part idle-up; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/idle-h2" ./bench/idle-h2) || die "go build ./bench/idle-h2 failed"
fi
if has_part slowloris; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/slowloris" ./bench/slowloris) || die "go build ./bench/slowloris failed"
fi
if has_part openloop; then
	(cd "$REPO_DIR" && go build -o "$WORK/bin/latseries" ./bench/latseries) || die "go build ./bench/latseries failed"
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
# h2up: ebb and base serve it on their usual port (started with
# ebb-h2up.yaml for it); nginx and HAProxy on a server of its own. The
# idle-up part uses the same ports (ebb-idleup.yaml, nginx-idleup.conf,
# haproxy-idleup.cfg).
declare -A H2UP_PORT=([ebb]=$EBB_PORT [base]=$BASE_PORT [nginx]=$NGINX_H2UP_PORT [haproxy]=$HAPROXY_H2UP_PORT)

USED_PORTS=("$ORIGIN_PORT")
for p in $PROXIES; do
	USED_PORTS+=("${PORT[$p]}")
	if (has_part h2c || has_part idle || has_part openloop) && [[ $p != fasthttp ]]; then USED_PORTS+=("${H2C_PORT[$p]}"); fi
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
has_part h2up && USED_PORTS+=("$ORIGIN_H2C_PORT")
has_part h2up && has_proxy nginx && USED_PORTS+=("$NGINX_H2UP_PORT")
has_part h2up && has_proxy haproxy && USED_PORTS+=("$HAPROXY_H2UP_PORT")
has_part idle-up && USED_PORTS+=("$ORIGIN_IDLEUP_PORT")
has_part idle-up && has_proxy nginx && USED_PORTS+=("$NGINX_H2UP_PORT")
has_part idle-up && has_proxy haproxy && USED_PORTS+=("$HAPROXY_H2UP_PORT")
for port in $(printf '%s\n' "${USED_PORTS[@]}" | sort -u); do
	port_free "$port" || die "port $port on 127.0.0.1 is already in use"
done

# ---------------------------------------------------------------------------
# Configurations: bench/harness writes every one the run may use, from
# bench/harness/ebb.yaml.tmpl and bench/peers' nginx and HAProxy templates.
# It reads the knobs from the environment, as resolved here (it has no
# defaults of its own); it also parses each run's output and writes the
# report.
# ---------------------------------------------------------------------------

BASE_ACCESS_LOG=1 # a base from before telemetry.access_log existed has no such key
if has_proxy base && ! git -C "$REPO_DIR" show "$BASE_COMMIT:config/schema.go" | grep -q 'key:"access_log"'; then
	BASE_ACCESS_LOG=0
fi
export WORK PARTS_RUN PROXIES BASE BASE_COMMIT=${BASE_COMMIT:-} EBB_GOMAXPROCS BASE_GOMAXPROCS BASE_ACCESS_LOG SMALL_BYTES CLK_TCK PROXY_CPU LOAD_CPU \
	DURATION ROUNDS WARMUP CONNS H2_CONNS H2_STREAMS H2_WIDE_CONNS IDLE_CONNS IDLE_H1_CONNS \
	IDLE_UP_CONNS IDLE_UP_STREAMS IDLE_UP_CLIENTS \
	SLOW_CONNS SLOW_HOLD SLOW_CLIENT_CONNS OPENLOOP_RATES OPENLOOP_PROTOS OPENLOOP_CONNS OPENLOOP_NEIGHBOUR OPENLOOP_PERF ORIGIN_PORT ORIGIN_H2C_PORT ORIGIN_IDLEUP_PORT GRPC_PORT OTLP_PORT \
	EBB_PORT EBB_ADMIN_PORT EBB_TLS_PORT EBB_GRPC_PORT BASE_PORT BASE_ADMIN_PORT EBB_LOG_PORT EBB_LOG_ADMIN_PORT \
	EBB_TRACE100_PORT EBB_TRACE100_ADMIN_PORT EBB_TRACE1_PORT EBB_TRACE1_ADMIN_PORT \
	NGINX_PORT NGINX_H2C_PORT NGINX_TLS_PORT NGINX_GRPC_PORT NGINX_H2UP_PORT \
	HAPROXY_PORT HAPROXY_H2C_PORT HAPROXY_TLS_PORT HAPROXY_GRPC_PORT HAPROXY_H2UP_PORT
"$HARNESS" configs || die "bench/harness could not write the configurations"

# ---------------------------------------------------------------------------
# Origin: nginx on CPU 1, 64-byte body on /, 64 KiB static file on /64k
# (for h2up over h2c too, on ORIGIN_H2C_PORT).
# ---------------------------------------------------------------------------

mkdir -p "$WORK/origin/html" "$WORK/origin/tmp"
head -c "$LARGE_BYTES" /dev/zero | tr '\0' 'y' >"$WORK/origin/html/64k"

start_origin() {
	log "starting origin nginx on 127.0.0.1:$ORIGIN_PORT (CPU $LOAD_CPU)"
	taskset -c "$LOAD_CPU" nginx -p "$WORK/origin" -e "$WORK/origin/error.log" \
		-c "$WORK/origin/nginx.conf" >"$WORK/origin/stdout.log" 2>&1 &
	PID[origin]=$!
	wait_port origin "$ORIGIN_PORT" "$WORK/origin/error.log"
	check_body origin "$ORIGIN_PORT" / "$SMALL_BYTES"
	check_body origin "$ORIGIN_PORT" /64k "$LARGE_BYTES"
	if has_part h2up; then
		check_h2c origin "$ORIGIN_H2C_PORT" / "$SMALL_BYTES"
		check_h2c origin "$ORIGIN_H2C_PORT" /64k "$LARGE_BYTES"
	fi
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

# stop_sinks: stop them; each prints what it was sent, for the report.
stop_sinks() {
	local p
	for p in ebb-trace100 ebb-trace1; do
		[[ -n ${PID[sink-$p]:-} ]] || continue
		stop_pid "sink-$p"
		grep -q '^spans=' "$WORK/sink-$p/out.log" || { cat "$WORK/sink-$p/out.log" >&2; die "otlp-sink for $p printed no count"; }
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
		[[ $v != h2up ]] || conf=$WORK/ebb/ebb-h2up.yaml
		[[ $v != idle-up ]] || conf=$WORK/ebb/ebb-idleup.yaml
		taskset -c "$PROXY_CPU" env ${EBB_GOMAXPROCS:+GOMAXPROCS=$EBB_GOMAXPROCS} "$WORK/bin/ebb" run -config "$conf" -set admin.pprof=true \
			>"$WORK/ebb/stdout.log" 2>"${LOGF[ebb]}" &
		;;
	base)
		local conf=$WORK/base/ebb.yaml
		[[ $v != h2up ]] || conf=$WORK/base/ebb-h2up.yaml
		[[ $v != idle-up ]] || conf=$WORK/base/ebb-idleup.yaml
		taskset -c "$PROXY_CPU" env ${BASE_GOMAXPROCS:+GOMAXPROCS=$BASE_GOMAXPROCS} "$WORK/bin/ebb-base" run -config "$conf" \
			>"$WORK/base/stdout.log" 2>"${LOGF[base]}" &
		;;
	ebb-log | ebb-trace100 | ebb-trace1)
		taskset -c "$PROXY_CPU" "$WORK/bin/ebb" run -config "$WORK/$name/ebb.yaml" \
			>"$WORK/$name/stdout.log" 2>"${LOGF[$name]}" &
		;;
	nginx)
		taskset -c "$PROXY_CPU" nginx -p "$WORK/nginx" -e "${LOGF[nginx]}" \
			-c "$WORK/nginx/nginx${V_CONF[$v]:-}.conf" >"$WORK/nginx/stdout.log" 2>&1 &
		;;
	haproxy)
		# -db: foreground, a single process (no master-worker).
		taskset -c "$PROXY_CPU" haproxy -db -f "$WORK/haproxy/haproxy${V_CONF[$v]:-}.cfg" \
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
	idle-up) check_h2c "$name" "$port" / "$SMALL_BYTES" ;; # the origin has no /64k
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

# target_port VARIANT TARGET: the port the variant's load goes to.
target_port() {
	case ${V_KIND[$1]} in
	wrk) echo "${PORT[$2]}" ;;
	h2load)
		if [[ ${V_SCHEME[$1]} == https ]]; then
			echo "${TLS_PORT[$2]}"
		elif [[ $1 == h2up ]]; then
			echo "${H2UP_PORT[$2]}"
		else
			echo "${H2C_PORT[$2]}"
		fi
		;;
	grpc) echo "${GRPC_TARGET_PORT[$2]}" ;;
	idle-up) echo "${H2UP_PORT[$2]}" ;;
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

# Variants: kind (load generator), path, connections (or calls in
# flight), label, targets (the proxies measured, or direct).
read -r -a PROXY_LIST <<<"$PROXIES"
VARIANTS=()
# V_CONF: the suffix of the nginx and HAProxy configurations a variant
# starts them with, if not the usual ones (nginx-wide.conf, ...).
declare -A V_KIND=() V_PATH=() V_CONNS=() V_STREAMS=() V_SCHEME=() V_LABEL=() V_TARGETS=() V_CONF=()
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
# h2load_variant NAME SCHEME TITLE PORTS WHO: a variant of h2load at
# H2_CONNS x H2_STREAMS on /, measuring each proxy listed that has a port
# in the associative array named PORTS (WHO says which may, for the error).
h2load_variant() {
	local v=$1 scheme=$2 title=$3 who=$5 p t=""
	local -n ports=$4
	for p in "${PROXY_LIST[@]}"; do [[ -z ${ports[$p]:-} ]] || t+=" $p"; done
	[[ -n $t ]] || die "the $v part needs $who in PROXIES"
	VARIANTS+=("$v")
	V_KIND[$v]=h2load
	V_PATH[$v]=/
	V_SCHEME[$v]=$scheme
	V_CONNS[$v]=$H2_CONNS
	V_STREAMS[$v]=$H2_STREAMS
	V_LABEL[$v]="$title, $SMALL_BYTES-byte body, $H2_CONNS connections x $H2_STREAMS streams"
	V_TARGETS[$v]=${t# }
}
if has_part h2tls; then h2load_variant h2tls https "HTTP/2 over TLS" TLS_PORT "ebb, nginx or haproxy"; fi
if has_part h2up; then h2load_variant h2up http "h2c to an h2c upstream" H2UP_PORT "ebb, nginx, haproxy or base"; fi
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

# What the run measures, in its order, for the report.
{
	printf 'variant\tkind\tlabel\ttargets\n'
	for v in "${VARIANTS[@]}"; do printf '%s\t%s\t%s\t%s\n' "$v" "${V_KIND[$v]}" "${V_LABEL[$v]}" "${V_TARGETS[$v]}"; done
} >"$WORK/variants.tsv"
# The run's figures, as bench/harness report reads them: runs.tsv, one
# line per measured run, and slowloris.tsv, per attack (both written by
# bench/harness); rss.tsv, each proxy's peak RSS after a variant;
# idle.tsv, VmRSS before and with the idle connections, and how many of
# them were still open when checked; errors.txt, what
# went wrong (non-2xx responses, errors, connections not held).
printf 'variant\tproxy\tpeak_rss_kb\n' >"$WORK/rss.tsv"
printf 'part\tproxy\tvmrss_before_kb\tvmrss_after_kb\theld\n' >"$WORK/idle.tsv"
ERRORS=$WORK/errors.txt
: >"$ERRORS"

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

# log_lines: log each line of stdin.
log_lines() {
	local l
	while IFS= read -r l; do log "  $l"; done
}

# measure_run VARIANT ROUND TARGET: one measured run of the variant's load
# against TARGET, its figures appended to runs.tsv by bench/harness.
measure_run() {
	local v=$1 r=$2 p=$3 out t0 t1 c0 c1 res
	out=$WORK/load-$v-$p-$r.txt
	t0=$(cpu_ticks "$p")
	c0=$(cpu0_ticks)
	run_load "$v" "$p" "$out" "$DURATION"
	t1=$(cpu_ticks "$p")
	c1=$(cpu0_ticks)
	res=$("$HARNESS" measure -variant "$v" -round $((r + 1)) -proxy "$p" -kind "${V_KIND[$v]}" -out "$out" \
		-ticks $((t1 - t0)) -cpu0-ticks $((c1 - c0))) || die "cannot parse the output of $v against $p: $out"
	log_lines <<<"$res"
}

start_origin

# Calibration: wrk straight to the origin, wrk on CPU 0 (where the proxies
# will run), origin on CPU 1. Not a proxy figure: it tells how fast this
# machine is today, to compare reports taken at different times.
log "calibration: wrk straight to the origin (${DURATION}s)"
timeout --kill-after=5 $((DURATION + 30)) taskset -c "$PROXY_CPU" \
	wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$ORIGIN_PORT/" >"$WORK/calibration.txt" 2>&1 ||
	{ cat "$WORK/calibration.txt" >&2; die "wrk failed against the origin"; }
log "  origin direct: $(sed -n 's/^Requests\/sec: *//p' "$WORK/calibration.txt") req/s"

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
		printf '%s\t%s\t%s\n' "$v" "$p" "$(peak_rss_kb "$p")" >>"$WORK/rss.tsv"
	done
	if [[ $PROFILE == 1 && ($v == h2c || $v == h2up) && " ${V_TARGETS[$v]} " == *" ebb "* ]]; then
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
# vmrss_kb PID
vmrss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# measure_idle PART PROXY PROTO PORT CONNS: start PROXY for PART, have
# bench/idle-h2 -proto PROTO open CONNS connections to PORT, read the
# VmRSS before and with them, then check that the proxy still held every
# one of them.
measure_idle() {
	local part=$1 p=$2 proto=$3 port=$4 n=$5 w out i held before after
	start_proxy "$p" "$part"
	w=$(worker_pid "$p")
	before=$(vmrss_kb "$w")
	out=$WORK/$part-$p.txt
	# -hold is a bound: stop_pid below ends the hold.
	timeout --kill-after=5 300 taskset -c "$LOAD_CPU" "$WORK/bin/idle-h2" -proto "$proto" \
		-target "127.0.0.1:$port" -conns "$n" -hold 240s >"$out" 2>&1 &
	PID[idle-load]=$!
	await_ready idle-load "$out" 120 || { cat "$out" >&2; die "idle-h2 could not open $n $proto connections to $p"; }
	sleep 1 # let the proxy finish with the last answers
	after=$(vmrss_kb "$w")
	stop_pid idle-load # on SIGTERM idle-h2 counts the connections still open, then closes them
	held=$(sed -n 's/^alive \([0-9]*\).*/\1/p' "$out")
	printf '%s\t%s\t%s\t%s\t%s\n' "$part" "$p" "$before" "$after" "${held:-?}" >>"$WORK/idle.tsv"
	log "  $p: VmRSS $before kB, then $after kB; ${held:-?} of $n connections still open at the end"
	if [[ $held != "$n" ]]; then
		echo "$part $p: ${held:-?} of $n idle connections were still open after the measurement (it undercounts)" >>"$ERRORS"
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
	V_CONF[idle-h1]=-wide # nginx and HAProxy sized for IDLE_H1_CONNS
	for p in "${IDLE_H1_TARGETS[@]}"; do
		log "idle-h1: $IDLE_H1_CONNS idle HTTP/1.1 keep-alive connections to $p"
		measure_idle idle-h1 "$p" h1 "${PORT[$p]}" "$IDLE_H1_CONNS"
	done
fi

# The idle-up part: bench/idle-h2 -origin on CPU 1, up for the part,
# allows one stream per connection and holds the requests for /hold until
# IDLE_UP_CONNS are in flight at once (30 s at most), then answers them
# all; its /stats (asked directly) counts the connections open to it.
# The client, bench/idle-h2 -inflight, sends each request once the origin
# holds the one before (HAProxy would otherwise put several on a
# connection before the origin's SETTINGS reach it: see
# bench/idle-h2/origin.go).
start_idleup_origin() {
	log "starting the idle-up origin (bench/idle-h2 -origin) on 127.0.0.1:$ORIGIN_IDLEUP_PORT (CPU $LOAD_CPU)"
	mkdir -p "$WORK/idleup-origin"
	taskset -c "$LOAD_CPU" "$WORK/bin/idle-h2" -origin "127.0.0.1:$ORIGIN_IDLEUP_PORT" -barrier "$IDLE_UP_CONNS" \
		-barrier-wait 30s -hold-path /hold -body-bytes "$SMALL_BYTES" >"$WORK/idleup-origin/out.log" 2>&1 &
	PID[idleup-origin]=$!
	await_ready idleup-origin "$WORK/idleup-origin/out.log" 10 ||
		{ cat "$WORK/idleup-origin/out.log" >&2; die "the idle-up origin did not start"; }
	check_h2c idleup-origin "$ORIGIN_IDLEUP_PORT" / "$SMALL_BYTES"
}

# idleup_stats: the origin's /stats line, "conns=N held=N last=N:why
# refused=N" (conns: open to it, the asking one excepted; held: requests
# held now; last: how many requests the last release of the barrier let
# go, and whether all had come ("full") or the time ran out ("timeout");
# refused: streams refused, beyond one on a connection).
idleup_stats() {
	curl -sS --http2-prior-knowledge --max-time 5 "http://127.0.0.1:$ORIGIN_IDLEUP_PORT/stats" ||
		die "cannot read the idle-up origin's /stats"
}

# measure_idle_up PROXY: start PROXY for idle-up (fresh), read its VmRSS,
# have bench/idle-h2 -inflight pass IDLE_UP_CONNS requests through it at
# once, and once they are answered (the client gone) and the upstream
# connections idle, read its VmRSS again and ask the origin how many
# connections are open to it. A proxy that did not hold exactly
# IDLE_UP_CONNS then gets no figure (the report says how many it held)
# and a line in errors.txt, as does one that did not have them all in
# flight at once, or failed requests.
measure_idle_up() {
	local p=$1 n=$IDLE_UP_CONNS w out port before after stats held last
	start_proxy "$p" idle-up
	port=$(target_port idle-up "$p")
	w=$(worker_pid "$p")
	before=$(vmrss_kb "$w")
	out=$WORK/idle-up-$p.txt
	# The client's failure is reported, not fatal: the other proxies are
	# still measured.
	timeout --kill-after=5 120 taskset -c "$LOAD_CPU" "$WORK/bin/idle-h2" -inflight "$n" -streams "$IDLE_UP_STREAMS" \
		-target "127.0.0.1:$port" -gate "127.0.0.1:$ORIGIN_IDLEUP_PORT" -path /hold -hold 90s >"$out" 2>&1 || true
	if [[ $(sed -n 's/^done //p' "$out") != "$n bytes=$((n * SMALL_BYTES))" ]]; then
		log "  the client against $p: $(tail -n 1 "$out")"
		echo "idle-up $p: not every answer came whole: $(tail -n 1 "$out")" >>"$ERRORS"
	fi
	sleep 1 # let the proxy finish with the last answers
	after=$(vmrss_kb "$w")
	stats=$(idleup_stats)
	held=$(sed -n 's/^conns=\([0-9]*\) .*/\1/p' <<<"$stats")
	last=$(sed -n 's/.* last=\([^ ]*\).*/\1/p' <<<"$stats")
	printf 'idle-up\t%s\t%s\t%s\t%s\n' "$p" "$before" "$after" "${held:-?}" >>"$WORK/idle.tsv"
	log "  $p: VmRSS $before kB, then $after kB; ${held:-?} of $n upstream connections open then; the origin: $stats"
	if [[ $held != "$n" ]]; then
		echo "idle-up $p: ${held:-?} of $n upstream connections were open when its memory was read (no figure)" >>"$ERRORS"
	fi
	if [[ $last != "$n:full" ]]; then
		echo "idle-up $p: the origin's barrier last let ${last:-?} requests go (count:why), not $n:full: they were not all in flight at once" >>"$ERRORS"
	fi
	stop_pid "$p"
}

if has_part idle-up; then
	IDLE_UP_TARGETS=()
	for p in "${PROXY_LIST[@]}"; do [[ -z ${H2UP_PORT[$p]:-} ]] || IDLE_UP_TARGETS+=("$p"); done
	((${#IDLE_UP_TARGETS[@]} > 0)) || die "the idle-up part needs ebb, nginx, haproxy or base in PROXIES"
	V_KIND[idle-up]=idle-up
	V_CONF[idle-up]=-idleup
	start_idleup_origin
	for p in "${IDLE_UP_TARGETS[@]}"; do
		log "idle-up: $IDLE_UP_CONNS idle upstream HTTP/2 connections from $p"
		measure_idle_up "$p"
	done
	stop_pid idleup-origin
fi

# The slowloris part. Each round, for each proxy in turn: a wrk run alone
# (variant slow-base), then bench/slowloris opens SLOW_CONNS slow
# connections and, once they are all open, the same wrk run again
# (slow-attack); the attack lasts SLOW_HOLD seconds from its start, and its
# summary says how many connections the proxy still held at the end.
SLOW_TARGETS=()

# slow_attack ROUND PROXY
slow_attack() {
	local r=$1 p=$2 out i opened res
	out=$WORK/slowloris-$p-$r.txt
	timeout --kill-after=5 $((SLOW_HOLD + 30)) taskset -c "$LOAD_CPU" "$WORK/bin/slowloris" \
		-target "127.0.0.1:${PORT[$p]}" -conns "$SLOW_CONNS" -duration "${SLOW_HOLD}s" -path /slow >"$out" 2>&1 &
	PID[slowloris]=$!
	await_ready slowloris "$out" 30 || { cat "$out" >&2; die "slowloris did not get going against $p"; }
	opened=$(sed -n 's/^ready opened=\([0-9]*\).*/\1/p' "$out")
	if [[ $opened != "$SLOW_CONNS" ]]; then
		echo "slowloris round $((r + 1)) $p: ${opened:-?} of $SLOW_CONNS attack connections opened" >>"$ERRORS"
	fi
	measure_run slow-attack "$r" "$p"
	wait "${PID[slowloris]}" || { cat "$out" >&2; die "slowloris failed against $p"; }
	unset "PID[slowloris]"
	res=$("$HARNESS" attack -round $((r + 1)) -proxy "$p" -out "$out") || die "cannot parse slowloris output $out"
	log_lines <<<"$res"
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

# The openloop part: the load a sidecar sees, far below saturation. For
# each protocol of OPENLOOP_PROTOS and each neighbour setting (off, on),
# the proxies start fresh, are warmed up, and then each round measures
# every rate of OPENLOOP_RATES against every proxy, the order of the
# proxies rotated each round. The load is bench/latseries -rate on CPU 1:
# an open-loop schedule (see bench/latseries/openloop.go), HTTP/1.1 over
# OPENLOOP_CONNS keep-alive connections taken in turn, or h2c over one
# connection with at most OPENLOOP_CONNS streams. perf stat counts the
# proxy's system calls and context switches (nginx: its worker's) for the
# run: the load generator is its workload, so the count starts before
# the first request and ends after the last answer. "on": a busy loop at
# the proxies' priority pinned to CPU 0 beside them, started after the
# warm-ups and stopped (by PID) after the variant's rounds.
OL_TARGETS=()

# perf_pids NAME: the PIDs perf counts, comma-separated: the proxy's
# (every thread of it), nginx's worker's.
perf_pids() { worker_pid "$1"; }

# openloop_load PROTO TARGET RATE SECONDS OUT: one run of the open-loop
# generator against TARGET, under perf stat (its counts go to OUT.perf;
# OPENLOOP_PERF=0: without).
openloop_load() {
	local proto=$1 p=$2 rate=$3 dur=$4 out=$5 v=ol-$1 port perf=()
	port=$(target_port "$v" "$p")
	if [[ $OPENLOOP_PERF == 1 ]]; then
		perf=(perf stat -x, -o "$out.perf" -e raw_syscalls:sys_enter,context-switches,task-clock -p "$(perf_pids "$p")" --)
	fi
	timeout --kill-after=5 $((dur + 45)) taskset -c "$LOAD_CPU" "${perf[@]}" \
		"$WORK/bin/latseries" -target "127.0.0.1:$port" -path / -proto "$proto" -c "$OPENLOOP_CONNS" -rate "$rate" -d "${dur}s" \
		>"$out" 2>&1 || { cat "$out" >&2; die "latseries -rate $rate -proto $proto failed against $p"; }
}

# measure_openloop PROTO NEIGHBOUR RATE ROUND TARGET: one measured run;
# bench/harness appends its figures to openloop.tsv.
measure_openloop() {
	local proto=$1 nb=$2 rate=$3 r=$4 p=$5 out t0 t1 c0 c1 res
	out=$WORK/openloop-$proto-$nb-$rate-$p-$r.txt
	t0=$(cpu_ticks "$p")
	c0=$(cpu0_ticks)
	openloop_load "$proto" "$p" "$rate" "$DURATION" "$out"
	t1=$(cpu_ticks "$p")
	c1=$(cpu0_ticks)
	local perf=$out.perf
	[[ $OPENLOOP_PERF == 1 ]] || perf=""
	res=$("$HARNESS" openloop -proto "$proto" -neighbour "$nb" -rate "$rate" -round $((r + 1)) -proxy "$p" \
		-out "$out" -perf "$perf" -ticks $((t1 - t0)) -cpu0-ticks $((c1 - c0))) ||
		die "cannot parse the open-loop run of $proto at $rate req/s against $p: $out"
	log_lines <<<"$res"
}

if has_part openloop; then
	for p in "${PROXY_LIST[@]}"; do
		case $p in ebb | ebb-log | nginx | haproxy | base) OL_TARGETS+=("$p") ;; esac
	done
	((${#OL_TARGETS[@]} > 0)) || die "the openloop part needs ebb, ebb-log, nginx, haproxy or base in PROXIES"
	case $OPENLOOP_NEIGHBOUR in off) OL_NB=(off) ;; on) OL_NB=(on) ;; both) OL_NB=(off on) ;; esac
	read -r -a OL_RATES <<<"$OPENLOOP_RATES"
	OL_TOP=0
	for rate in "${OL_RATES[@]}"; do ((rate <= OL_TOP)) || OL_TOP=$rate; done
	V_KIND+=([ol-h1]=wrk [ol-h2c]=h2load)
	V_SCHEME+=([ol-h2c]=http)
	NT=${#OL_TARGETS[@]}
	for proto in $OPENLOOP_PROTOS; do
		for nb in "${OL_NB[@]}"; do
			log "openloop: $proto at ${OL_RATES[*]} req/s, neighbour $nb, against ${OL_TARGETS[*]}"
			for p in "${OL_TARGETS[@]}"; do start_proxy "$p" "ol-$proto"; done
			if ((WARMUP > 0)); then
				for p in "${OL_TARGETS[@]}"; do
					log "  warm-up $p (${WARMUP}s at $OL_TOP req/s)"
					openloop_load "$proto" "$p" "$OL_TOP" "$WARMUP" "$WORK/warmup-openloop-$proto-$nb-$p.txt"
				done
			fi
			if [[ $nb == on ]]; then
				# The neighbour: an application that wants the whole CPU, at
				# the proxies' priority (they all run at nice 0).
				taskset -c "$PROXY_CPU" sh -c 'while :; do :; done' &
				PID[neighbour]=$!
			fi
			for ((r = 0; r < ROUNDS; r++)); do
				for rate in "${OL_RATES[@]}"; do
					for ((i = 0; i < NT; i++)); do
						measure_openloop "$proto" "$nb" "$rate" "$r" "${OL_TARGETS[$(((r + i) % NT))]}"
					done
				done
			done
			stop_pid neighbour
			for p in "${OL_TARGETS[@]}"; do stop_pid "$p"; done
		done
	done
fi

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

STEAL=$(awk -v s="$(($(steal_ticks) - STEAL0))" -v hz="$CLK_TCK" -v t="$(($(date +%s) - T0))" -v n="$(nproc --all)" \
	'BEGIN { printf "%.1f%%", (t > 0) ? 100 * s / hz / (t * n) : 0 }')
# What the report's header says of the machine and the tools. (wrk -v
# exits 1.)
export STEAL REPORT_DATE GO_VERSION NGINX_VERSION WRK_VERSION HAPROXY_VERSION="" H2LOAD_VERSION="" GRPC_VERSION="" PERF_VERSION="" \
	NCPU CPU_MODEL KERNEL EBB_COMMIT EBB_DIRTY PROFILE_FILE
REPORT_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
GO_VERSION=$(go version | awk '{ print $3 }')
NGINX_VERSION=$(nginx -v 2>&1 | sed 's/^nginx version: //')
WRK_VERSION=$({ wrk -v 2>&1 || true; } | awk 'NR == 1 { print $2 }')
if has_proxy haproxy; then HAPROXY_VERSION=$(haproxy -v | awk 'NR == 1 { print $3 }'); fi
if has_part h2c || has_part h2up; then H2LOAD_VERSION=$(h2load --version | awk '{ print $2 }'); fi
if has_part openloop && [[ $OPENLOOP_PERF == 1 ]]; then PERF_VERSION=$(perf --version | awk '{ print $3 }'); fi
if has_part grpc; then
	GRPC_VERSION=$(go version -m "$WORK/bin/grpc-bench" | awk '$2 == "google.golang.org/grpc" { print $3 }')
fi
NCPU=$(nproc --all)
CPU_MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
KERNEL=$(uname -r)

REPORT=$BENCH_DIR/results/$STAMP.md
"$HARNESS" report >"$REPORT" || die "bench/harness could not write the report"
cat "$REPORT"
log "report written to $REPORT"
