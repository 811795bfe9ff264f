package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// The environment rule: an EBB_ variable is a configuration override when
// what follows the prefix, up to its first "__" (or all of it), names a
// top-level key: EBB_DRAIN__TIMEOUT, EBB_LISTENERS__0__ADDRESS, EBB_ADMIN.
// A misspelt key inside a section (EBB_DRAIN__TIMEOUTT) is then an error,
// as in the file. Every other EBB_ variable is not ebb's and is left
// alone: Kubernetes injects EBB_SERVICE_HOST, EBB_PORT_80_TCP... into every
// pod of a namespace with a Service named ebb, and those are skipped
// silently; any other one is reported (Config.Ignored: a warning at start,
// listed by ebb check), with the key it was probably meant for.

// serviceLink matches the variables of Kubernetes service links, after
// the prefix: SERVICE_HOST, SERVICE_PORT, SERVICE_PORT_<NAME>, PORT,
// PORT_<N>_<PROTO>, PORT_<N>_<PROTO>_{PROTO,PORT,ADDR}.
var serviceLink = regexp.MustCompile(`^(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$`)

// topKeys are the configuration's top-level keys, from the schema.
var topKeys, _ = keyFields(reflect.TypeFor[Config]())

// splitEnviron separates the EBB_ variables that override keys from those
// that are not ebb's, and describes each of the latter that is not a
// Kubernetes service link.
func splitEnviron(environ []string) (overrides []string, ignored []Problem) {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, EnvPrefix)
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(rest, "__")
		if slices.Contains(topKeys, strings.ToLower(first)) {
			overrides = append(overrides, kv)
			continue
		}
		if serviceLink.MatchString(rest) {
			continue
		}
		ignored = append(ignored, Problem{Source: "environment " + name, Msg: notAKey(rest)})
	}
	return overrides, ignored
}

// notAKey explains why the variable EBB_<rest> is not read, with the
// name it was probably meant to have.
func notAKey(rest string) string {
	msg := "not a configuration key (the top-level keys are " + strings.Join(topKeys, ", ") + "); ignored"
	first, tail, nested := strings.Cut(rest, "__")
	lower := strings.ToLower(first)
	if !nested {
		// EBB_DRAIN_TIMEOUT: one underscore where two were meant.
		for _, k := range topKeys {
			if sub, ok := strings.CutPrefix(lower, k+"_"); ok && sub != "" {
				return msg + "; did you mean " + EnvPrefix + strings.ToUpper(k) + "__" + strings.ToUpper(sub) + "? Levels are separated by two underscores"
			}
		}
	}
	if best := suggest(lower, topKeys); best != "" {
		name := EnvPrefix + strings.ToUpper(best)
		if nested {
			name += "__" + tail
		}
		return msg + "; did you mean " + name + "?"
	}
	return msg
}
