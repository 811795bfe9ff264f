#!/usr/bin/env bash
# Installs what ebb's tests and benchmarks need on a fresh Debian machine
# with Go: curl, nginx, HAProxy, wrk and h2load (nghttp2-client). Safe to
# run again: it installs only what is missing. Needs root (or sudo).
set -euo pipefail

need=()
command -v curl    >/dev/null 2>&1 || need+=(curl)
command -v nginx   >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]   || need+=(nginx)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v wrk     >/dev/null 2>&1 || need+=(wrk)
command -v h2load  >/dev/null 2>&1 || need+=(nghttp2-client)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)

if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "e2e/deps.sh: installing ${need[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The Debian nginx package starts a server on port 80; tests start their
# own nginx processes and need none running.
