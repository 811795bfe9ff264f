#!/usr/bin/env bash
# The whole test suite, as the README's test command runs it: installs the
# tools the tests need, then checks formatting, vets, and runs every test
# with the race detector; then the HTTP/2 engine again on Go 1.27.
set -euo pipefail
cd "$(dirname "$0")/.."
./e2e/deps.sh
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
go test -race -count=1 -timeout 14m ./...
# Each fuzz target briefly, beyond its committed corpus, so that a
# regression in parsing shows (a failing input is written to testdata/).
# On Go 1.27.3 (fetched once through the module proxy): Go 1.26's fuzzing
# coordinator can fail a target with "context deadline exceeded" when
# -fuzztime ends while a worker is still on an input, with no failing input
# behind it (go.dev/issue/75804, fixed in Go 1.27).
for target in config:FuzzLoad proxy/downstream:FuzzPeek proxy/headers:FuzzRequestRules proxy/paths:FuzzNormalize proxy/h1:FuzzHTTP1Request proxy/h1:FuzzHeadScan proxy/h2:FuzzConn proxy/upstream:FuzzH1UpstreamResponse proxy/cluster:FuzzH2UpstreamFrames proxy/h2client:FuzzResponseFrames; do
	GOTOOLCHAIN=go1.27.3 go test -run '^$' -fuzz "^${target#*:}\$" -fuzztime 5s "./${target%%:*}/"
done
# The HTTP/2 engine on the newer Go release too: its own tests, the proxy
# package's matrix and h2spec.
GOTOOLCHAIN=go1.27.3 go test -count=1 -timeout 5m ./proxy/h2/ ./proxy/
GOTOOLCHAIN=go1.27.3 go test -count=1 -timeout 5m -run TestH2Spec ./e2e/
