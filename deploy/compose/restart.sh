#!/usr/bin/env bash
# Restarts one ebb replica of the compose topology (docker-compose.yml)
# while the load client sends traffic through nginx, and reports the
# client errors. Exit status 0 when no client saw an error.
#
#   deploy/compose/restart.sh [replica] [load duration]   # ebb-1, 20s
#
# It starts the topology if needed (building the images), runs the load
# client (docker compose run load), restarts the replica once the load is
# warm (Docker sends SIGTERM: ebb drains and exits, then starts again),
# prints the replica's drain summary, and waits for the load to end.
# COMPOSE overrides the compose command (default: docker compose, else
# docker-compose).
set -euo pipefail
cd "$(dirname "$0")/../.."
replica=${1:-ebb-1}
duration=${2:-20s}
if [ -n "${COMPOSE:-}" ]; then
	read -r -a compose <<<"$COMPOSE"
elif docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
else
	compose=(docker-compose)
fi

echo "== starting the topology (app-1, app-2, ebb-1, ebb-2, waf)"
"${compose[@]}" up -d --build waf

log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== load through nginx for $duration"
"${compose[@]}" --profile load run --rm -T load -duration "$duration" >"$log" 2>&1 &
load=$!
# Until the load is warm (bounded: 60s for the load container to start).
for _ in $(seq 600); do
	if grep -q '^warm' "$log" || ! kill -0 "$load" 2>/dev/null; then
		break
	fi
	sleep 0.1
done
if ! grep -q '^warm' "$log"; then
	cat "$log"
	echo "restart.sh: the load did not get going" >&2
	kill "$load" 2>/dev/null || true
	exit 1
fi
grep '^warm' "$log"

echo "== restarting $replica under load"
began=$(date +%s%N)
"${compose[@]}" restart "$replica"
echo "$replica stopped and started again in $(( ($(date +%s%N) - began) / 1000000 )) ms"
# What ebb said about its drain: the phases, the summary, the exit.
"${compose[@]}" logs --no-color "$replica" | grep -E '"msg":"(drain started|drain phase|drain summary|ebb exiting)"' | tail -n 8 || true

status=0
wait "$load" || status=$?
echo "== the load client's report"
grep -v '^warm' "$log"
exit "$status"
