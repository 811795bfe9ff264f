// Package config holds ebb's configuration schema, loads it from a YAML file,
// the environment and flags (in that order, later wins), and validates it.
// Its doc comments are the configuration reference: docs/CONFIGURATION.md
// is generated from them, from the defaults set by Default and the
// elements' setDefaults, and from what Validate accepts.
//
// ebb reads one YAML (or JSON) file, ebb.yaml unless -config names
// another; examples/ebb.yaml writes every key with its default. Keys are
// snake_case. Unknown keys are errors, named with the file and the
// nearest known key:
//
//	ebb.yaml: listeners[0].adress: unknown key (did you mean "address"?)
//
// Durations are written 500ms, 2s, 1m30s; sizes 65536, 64KiB, 1MiB, 1GiB
// (binary) or 64KB, 1MB (decimal). Relative file paths are relative to
// the configuration file's directory.
//
// # Overrides
//
// Any key can be overridden. Order, last wins: the file, then the
// environment, then the command line's -set key=value (repeatable). In
// the environment, a key is EBB_ and its path in capitals with two
// underscores between levels, list elements by index:
// EBB_DRAIN__TIMEOUT=40s, EBB_LISTENERS__0__ADDRESS=0.0.0.0:8080; a list
// of strings is written a,b or [a, b].
//
// An EBB_ variable is read as an override only when it starts with a
// top-level key (EBB_ADMIN…, EBB_LISTENERS…, EBB_CLUSTERS…, EBB_DRAIN…,
// EBB_TELEMETRY…, EBB_RELOAD…, EBB_TAKEOVER…); inside one, a misspelt key is
// an error as in the file:
//
//	environment EBB_DRAIN__TIMEOUTT: drain.timeoutt: unknown key (did you mean "timeout"?)
//
// Any other EBB_ variable is not ebb's and never stops it. Kubernetes
// injects EBB_SERVICE_HOST, EBB_SERVICE_PORT…, EBB_PORT, EBB_PORT_80_TCP…
// into every pod of a namespace that has a Service named ebb: those are
// skipped silently (enableServiceLinks: false in the pod spec removes them
// altogether). The others are ignored with a warning at start, and by ebb
// check, which still passes, naming the variable probably meant:
//
//	environment EBB_DRAIN_TIMEOUT: not a configuration key (…); ignored; did you mean EBB_DRAIN__TIMEOUT? Levels are separated by two underscores
//
// # Static and dynamic settings
//
// The schema is split by how a change takes effect. Routes and clusters
// are dynamic: they live in an immutable snapshot that the request path
// loads once per request, and a reload swaps them live, as it does a
// listener's limits.max_body_bytes, limits.max_in_flight, headers and
// paths, and telemetry.access_log's enabled and format. The rest is
// static and needs a restart (docs/RELOAD.md, docs/RESTART.md).
package config

//go:generate go run ./internal/refgen -dir . -o ../docs/CONFIGURATION.md
