package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	yamlv3 "go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable that overrides a key:
// EBB_DRAIN__MIN_DURATION=3s sets drain.min_duration; list elements are
// addressed by index, as in EBB_LISTENERS__0__ADDRESS.
const EnvPrefix = "EBB_"

// Options are the sources layered over the file, in order.
type Options struct {
	// Environ is the environment, as os.Environ returns it. Only variables
	// starting with EnvPrefix and naming a top-level key are read (see
	// splitEnviron); the other EBB_ ones end up in Config.Ignored.
	Environ []string
	// Sets are key=value overrides from the command line (-set), applied last.
	Sets []string
}

// Load reads the YAML (or JSON) file at path, layers the environment and
// the command-line overrides over it, decodes it strictly and validates it.
// The error, if any, is an *Error listing every problem found.
func Load(path string, opts Options) (*Config, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
		return nil, &Error{Problems: []Problem{{Source: path, Msg: loadMessage(err)}}}
	}
	tree := k.Raw()
	sources := map[string]string{}
	var problems []Problem

	environ, ignored := splitEnviron(opts.Environ)
	envProvider := env.Provider("", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(k, v string) (string, any) {
			key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, EnvPrefix), "__", "."))
			sources[displayKey(key)] = "environment " + k
			return key, v
		},
	})
	envVals, err := envProvider.Read()
	if err != nil {
		return nil, fmt.Errorf("config: reading the environment: %w", err)
	}
	for _, key := range sortedKeys(envVals) {
		if err := override(&tree, key, envVals[key].(string)); err != nil {
			problems = append(problems, Problem{Source: sources[displayKey(key)], Key: displayKey(key), Msg: err.Error()})
		}
	}
	for _, s := range opts.Sets {
		key, val, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(key) == "" {
			problems = append(problems, Problem{Source: "flag -set " + s, Msg: "expected key=value, such as drain.delay=5s"})
			continue
		}
		key = strings.TrimSpace(key)
		sources[displayKey(key)] = "flag -set " + s
		if err := override(&tree, key, val); err != nil {
			problems = append(problems, Problem{Source: "flag -set " + s, Key: displayKey(key), Msg: err.Error()})
		}
	}

	cfg := Default()
	cfg.Source = path
	cfg.Ignored = ignored
	d := decoder{source: func(key string) string {
		// The nearest key set by the environment or a flag, if any:
		// EBB_CLUSTERS__0__DISCOVERY__STATIC sets static[0] too.
		for k := key; k != ""; k = parentKey(k) {
			if s, ok := sources[k]; ok {
				return s
			}
		}
		return path
	}}
	d.decode("", tree, reflect.ValueOf(cfg).Elem())
	problems = append(problems, d.problems...)
	resolvePaths(cfg, filepath.Dir(path))
	// Validate even after decoding problems, so that one run of ebb check
	// lists everything (a misspelt key also shows as the missing one).
	for _, p := range cfg.Validate() {
		p.Source = d.source(p.Key)
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return cfg, nil
}

// resolvePaths makes relative file paths in the configuration relative to
// the directory of the configuration file, not to ebb's working directory.
func resolvePaths(cfg *Config, dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&cfg.Drain.Report)
	for i := range cfg.Clusters {
		abs(&cfg.Clusters[i].Discovery.File)
		abs(&cfg.Clusters[i].TLS.CAFile)
	}
	for i := range cfg.Listeners {
		if t := cfg.Listeners[i].TLS; t != nil {
			abs(&t.Cert)
			abs(&t.Key)
		}
	}
}

func loadMessage(err error) string {
	var yerr *yamlv3.TypeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.As(err, &yerr):
		return "not valid YAML: " + strings.Join(yerr.Errors, "; ")
	}
	msg := err.Error()
	if strings.Contains(msg, "yaml:") {
		return "not valid YAML: " + msg[strings.Index(msg, "yaml:")+len("yaml: "):]
	}
	return msg
}

// overrideValue turns an environment or flag value into a tree value. Flow
// lists and mappings ("[a, b]", "{...}") are parsed as YAML; anything else
// stays a string, which the decoder converts to the key's type.
func overrideValue(v string) any {
	t := strings.TrimSpace(v)
	if strings.HasPrefix(t, "[") || strings.HasPrefix(t, "{") {
		var out any
		if err := yamlv3.Unmarshal([]byte(t), &out); err == nil {
			return out
		}
	}
	return v
}

// setPath returns node with node[path] = v, creating mappings and lists on
// the way. A numeric segment indexes a list; it may be one past the end, to
// append.
func setPath(node any, path []string, v any) (any, error) {
	if len(path) == 0 {
		return v, nil
	}
	seg := path[0]
	if idx, err := strconv.Atoi(seg); err == nil {
		l, ok := node.([]any)
		if !ok && node != nil {
			return nil, fmt.Errorf("%s is not a list element: the key above it holds %s", seg, describe(node))
		}
		if idx < 0 || idx > len(l) {
			return nil, fmt.Errorf("no list element %d (the list has %d)", idx, len(l))
		}
		if idx == len(l) {
			l = append(l, nil)
		}
		if l[idx], err = setPath(l[idx], path[1:], v); err != nil {
			return nil, err
		}
		return l, nil
	}
	m, ok := node.(map[string]any)
	if !ok {
		if node != nil {
			return nil, fmt.Errorf("cannot set %s inside %s", seg, describe(node))
		}
		m = map[string]any{}
	}
	sub, err := setPath(m[seg], path[1:], v)
	if err != nil {
		return nil, err
	}
	m[seg] = sub
	return m, nil
}

func override(tree *map[string]any, key, val string) error {
	n, err := setPath(*tree, strings.Split(key, "."), overrideValue(val))
	if err != nil {
		return err
	}
	*tree = n.(map[string]any)
	return nil
}

// parentKey returns the key one level up: listeners[0].address ->
// listeners[0] -> listeners -> "".
func parentKey(k string) string {
	i := strings.LastIndexAny(k, ".[")
	if i < 0 {
		return ""
	}
	return k[:i]
}

// displayKey turns "listeners.0.address" into "listeners[0].address", the
// form every message uses.
func displayKey(k string) string {
	parts := strings.Split(k, ".")
	var b strings.Builder
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Shorter keys first so a parent is set before its children.
	slices.SortFunc(keys, func(a, b string) int {
		if c := strings.Count(a, ".") - strings.Count(b, "."); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
