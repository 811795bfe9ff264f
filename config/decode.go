package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Problem is one thing wrong with a configuration: the key it concerns and
// what was expected. Source names the file, environment variable or flag
// that set the key.
type Problem struct {
	Source string
	Key    string
	Msg    string
}

func (p Problem) String() string {
	switch {
	case p.Source != "" && p.Key != "":
		return p.Source + ": " + p.Key + ": " + p.Msg
	case p.Key != "":
		return p.Key + ": " + p.Msg
	case p.Source != "":
		return p.Source + ": " + p.Msg
	}
	return p.Msg
}

// Error lists every problem found in a configuration.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "config: " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// valueDecoder is implemented by types with their own textual form.
type valueDecoder interface {
	decode(v any) error
}

// defaulter is implemented by list elements that have defaults of their own.
type defaulter interface {
	setDefaults()
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	decoderType  = reflect.TypeFor[valueDecoder]()
	defaulterTyp = reflect.TypeFor[defaulter]()
)

// decoder fills typed structs from the generic tree koanf produces. It is
// strict: a key the schema does not know is a problem, reported with the
// nearest known key.
type decoder struct {
	source   func(key string) string
	problems []Problem
}

func (d *decoder) fail(key, format string, args ...any) {
	d.problems = append(d.problems, Problem{Source: d.source(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) decode(key string, raw any, out reflect.Value) {
	if out.CanAddr() && out.Addr().Type().Implements(decoderType) {
		if err := out.Addr().Interface().(valueDecoder).decode(raw); err != nil {
			d.fail(key, "%v", err)
		}
		return
	}
	if out.Type() == durationType {
		v, err := decodeDuration(raw)
		if err != nil {
			d.fail(key, "%v", err)
			return
		}
		out.SetInt(int64(v))
		return
	}
	switch out.Kind() {
	case reflect.Pointer:
		if raw == nil {
			out.SetZero()
			return
		}
		elem := reflect.New(out.Type().Elem())
		if def, ok := elem.Interface().(defaulter); ok {
			def.setDefaults()
		}
		d.decode(key, raw, elem.Elem())
		out.Set(elem)
	case reflect.Struct:
		d.decodeStruct(key, raw, out)
	case reflect.Slice:
		d.decodeSlice(key, raw, out)
	case reflect.Map:
		d.decodeMap(key, raw, out)
	case reflect.String:
		switch x := raw.(type) {
		case string:
			out.SetString(x)
		case int, float64:
			out.SetString(fmt.Sprint(x))
		default:
			d.fail(key, "expected a string, got %s", describe(raw))
		}
	case reflect.Int, reflect.Int64:
		switch x := raw.(type) {
		case int:
			out.SetInt(int64(x))
		case string:
			n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
			if err != nil {
				d.fail(key, "expected a whole number, got %q", x)
				return
			}
			out.SetInt(n)
		default:
			d.fail(key, "expected a whole number, got %s", describe(raw))
		}
	case reflect.Float64:
		switch x := raw.(type) {
		case int:
			out.SetFloat(float64(x))
		case float64:
			out.SetFloat(x)
		case string:
			f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
			if err != nil {
				d.fail(key, "expected a number, got %q", x)
				return
			}
			out.SetFloat(f)
		default:
			d.fail(key, "expected a number, got %s", describe(raw))
		}
	case reflect.Bool:
		switch x := raw.(type) {
		case bool:
			out.SetBool(x)
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(x))
			if err != nil {
				d.fail(key, "expected true or false, got %q", x)
				return
			}
			out.SetBool(b)
		default:
			d.fail(key, "expected true or false, got %s", describe(raw))
		}
	default:
		panic(fmt.Sprintf("config: no decoder for %s at %s", out.Type(), key))
	}
}

func (d *decoder) decodeStruct(key string, raw any, out reflect.Value) {
	m, ok := raw.(map[string]any)
	if !ok {
		if raw == nil { // "drain:" with nothing under it keeps the defaults
			return
		}
		d.fail(key, "expected a mapping of keys, got %s", describe(raw))
		return
	}
	known, byKey := keyFields(out.Type())
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // stable messages
	for _, k := range keys {
		sub := join(key, k)
		i, ok := byKey[k]
		if !ok {
			if to, ok := movedKeys[sub]; ok {
				d.fail(sub, "this key is now %s", to)
				continue
			}
			if s := suggest(k, known); s != "" {
				d.fail(sub, "unknown key (did you mean %q?)", s)
			} else {
				d.fail(sub, "unknown key (known here: %s)", strings.Join(known, ", "))
			}
			continue
		}
		d.decode(sub, m[k], out.Field(i))
	}
}

// decodeMap decodes a mapping of names to values (map[string]string),
// such as HTTP headers: its keys are the user's, not the schema's.
func (d *decoder) decodeMap(key string, raw any, out reflect.Value) {
	if raw == nil {
		return
	}
	m, ok := raw.(map[string]any)
	if !ok {
		d.fail(key, "expected a mapping of names to values, got %s", describe(raw))
		return
	}
	if out.IsNil() {
		out.Set(reflect.MakeMapWithSize(out.Type(), len(m)))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := reflect.New(out.Type().Elem()).Elem()
		d.decode(join(key, k), m[k], v)
		out.SetMapIndex(reflect.ValueOf(k), v)
	}
}

// movedKeys names the keys that moved, with their new place.
var movedKeys = map[string]string{
	"telemetry.log.access": "telemetry.access_log.enabled",
}

func (d *decoder) decodeSlice(key string, raw any, out reflect.Value) {
	var items []any
	switch x := raw.(type) {
	case nil:
		out.SetZero()
		return
	case []any:
		items = x
	case string:
		// A list of strings may be given as "a,b" (handy in the environment).
		if out.Type().Elem().Kind() != reflect.String {
			d.fail(key, "expected a list, got %s", describe(raw))
			return
		}
		for _, s := range strings.Split(x, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
	default:
		d.fail(key, "expected a list, got %s", describe(raw))
		return
	}
	s := reflect.MakeSlice(out.Type(), len(items), len(items))
	for i, item := range items {
		elem := s.Index(i)
		if elem.Addr().Type().Implements(defaulterTyp) {
			elem.Addr().Interface().(defaulter).setDefaults()
		}
		d.decode(key+"["+strconv.Itoa(i)+"]", item, elem)
	}
	out.Set(s)
}

// keyFields returns the keys of struct type t, in field order, and the
// field index of each.
func keyFields(t reflect.Type) (known []string, byKey map[string]int) {
	known = make([]string, 0, t.NumField())
	byKey = make(map[string]int, t.NumField())
	for i := range t.NumField() {
		k := t.Field(i).Tag.Get("key")
		if k == "" || k == "-" {
			continue
		}
		known = append(known, k)
		byKey[k] = i
	}
	return known, byKey
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// suggest returns the known key nearest to k, if one is close enough to be
// a plausible typo.
func suggest(k string, known []string) string {
	best, bestD := "", 3
	for _, c := range known {
		if dist := editDistance(k, c); dist < bestD {
			best, bestD = c, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
