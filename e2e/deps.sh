#!/usr/bin/env bash
# Installs what ebb's tests and benchmarks need on a fresh Debian machine
# with Go: curl, nginx, HAProxy, wrk, h2load (nghttp2-client), headless
# Chromium (for the drain report's page) with a font, a Docker engine with
# docker-compose and debootstrap (the compose topology, built and run for
# real: e2e/compose_docker_test.go starts dockerd if none runs), and
# h2spec with go install, and Prometheus with promtool (the alert rules
# and the dashboard in deploy/ checked against a real one:
# e2e/dashboard_test.go). Safe to run again: it installs only what is
# missing. Needs root (or sudo) for the Debian packages.
set -euo pipefail

need=()
command -v curl    >/dev/null 2>&1 || need+=(curl)
command -v nginx   >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]   || need+=(nginx)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v wrk     >/dev/null 2>&1 || need+=(wrk)
command -v h2load  >/dev/null 2>&1 || need+=(nghttp2-client)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1 || need+=(chromium-headless-shell)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || need+=(prometheus)

if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "e2e/deps.sh: installing ${need[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# h2spec (HTTP/2 conformance, e2e/h2spec_test.go) is a Go program; the
# tests look for it on $PATH, then where go install puts it. Keep the
# version in step with h2specVersion in e2e/h2spec_test.go.
h2spec_version="v2.2.1+incompatible"
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"
if ! command -v h2spec >/dev/null 2>&1 && [ ! -x "$gobin/h2spec" ]; then
	echo "e2e/deps.sh: installing h2spec $h2spec_version" >&2
	if ! out=$(go install "github.com/summerwind/h2spec/cmd/h2spec@$h2spec_version" 2>&1); then
		echo "$out" >&2
		exit 1
	fi
fi
