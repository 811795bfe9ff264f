package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ebb-proxy/ebb/config"
)

// sample is the smallest configuration Load accepts, so that the
// defaults a listener, a route, a cluster and a DNS source take when
// they are listed can be read from a loaded one. The keys it sets are
// the ones Validate requires (found again by probing, see required).
const sample = `
listeners: [{name: l, address: "127.0.0.1:1", routes: [{cluster: c}]}]
clusters: [{name: c, discovery: {dns: {name: c.test}}}]
`

// docs holds the doc comments of package config's types and fields.
type docs struct {
	pkg    string                       // the package doc comment
	types  map[string]string            // type name -> its doc
	fields map[string]map[string]string // type name -> field name -> its doc
}

// parseDocs reads the doc comments of the non-test Go files in dir.
func parseDocs(dir string) (*docs, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	d := &docs{types: map[string]string{}, fields: map[string]map[string]string{}}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if f.Doc != nil {
			d.pkg += f.Doc.Text()
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gen.Specs) == 1 {
					doc = gen.Doc
				}
				d.types[ts.Name.Name] = doc.Text()
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				fields := map[string]string{}
				for _, fl := range st.Fields.List {
					text := fl.Doc.Text()
					if text == "" {
						text = fl.Comment.Text()
					}
					for _, n := range fl.Names {
						fields[n.Name] = text
					}
				}
				d.fields[ts.Name.Name] = fields
			}
		}
	}
	if d.pkg == "" {
		return nil, fmt.Errorf("no package doc comment in %s", dir)
	}
	return d, nil
}

// load returns the sample configuration, loaded as ebb loads a file.
func load() (*config.Config, error) {
	dir, err := os.MkdirTemp("", "refgen")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ebb.yaml")
	if err := os.WriteFile(path, []byte(sample), 0o600); err != nil {
		return nil, err
	}
	return config.Load(path, config.Options{})
}

// step is one move from a value to a value inside it: a struct field
// (through a pointer, which is followed on the way), or elem, the first
// element of a list.
type step struct{ field int }

const elem = -1

// at returns the value at steps from v, making what is missing on the
// way (a nil pointer, an empty list) so that it can be set.
func at(v reflect.Value, steps []step) reflect.Value {
	for _, s := range steps {
		switch {
		case v.Kind() == reflect.Pointer:
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
			if s.field != elem {
				v = v.Field(s.field)
			}
		case s.field == elem:
			if v.Len() == 0 {
				v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			}
			v = v.Index(0)
		default:
			v = v.Field(s.field)
		}
	}
	return v
}

// probe loads the sample, lets set change the value at steps, validates
// the result and returns the problems Validate reports for key.
func probe(steps []step, key string, set func(reflect.Value)) ([]string, error) {
	cfg, err := load()
	if err != nil {
		return nil, err
	}
	set(at(reflect.ValueOf(cfg).Elem(), steps))
	var msgs []string
	for _, p := range cfg.Validate() {
		if p.Key == key {
			msgs = append(msgs, p.Msg)
		}
	}
	return msgs, nil
}

// required reports whether Validate refuses the key left empty and
// Default gives it no value (admin.address has one). Default says nothing
// of the keys inside a list, whose element sets their defaults; Validate
// refuses none of those that has one as missing, so it alone decides.
func required(steps []step, key string) (bool, error) {
	if !slices.Contains(steps, step{elem}) && !at(reflect.ValueOf(config.Default()).Elem(), steps).IsZero() {
		return false, nil
	}
	msgs, err := probe(steps, key, func(v reflect.Value) { v.SetZero() })
	for _, m := range msgs {
		if strings.HasPrefix(m, "missing") || strings.HasPrefix(m, "at least one") {
			return true, err
		}
	}
	return false, err
}

// allowed returns the values Validate allows for a string key (or each
// string of a list), when it allows only some.
func allowed(steps []step, key string, t reflect.Type) ([]string, error) {
	const bogus = "\x00"
	set := func(v reflect.Value) { v.SetString(bogus) }
	if t.Kind() == reflect.Slice {
		steps = append(slices.Clone(steps), step{elem})
		key += "[0]"
	}
	msgs, err := probe(steps, key, set)
	for _, m := range msgs {
		if list, ok := strings.CutPrefix(m, "expected one of "); ok {
			list, _, _ = strings.Cut(list, ", got ")
			return strings.Split(list, ", "), err
		}
	}
	return nil, err
}

// row is one key of the reference.
type row struct {
	key, typ, def, doc string
}

// section is a top-level key with the rows of every key under it.
type section struct {
	key, doc string
	rows     []row
}

type generator struct {
	docs     *docs
	sections []section
}

// Generate returns the reference page for package config's sources in dir.
func Generate(dir string) ([]byte, error) {
	d, err := parseDocs(dir)
	if err != nil {
		return nil, err
	}
	return generate(d)
}

// generate returns the reference page for the doc comments in d.
func generate(d *docs) ([]byte, error) {
	cfg, err := load()
	if err != nil {
		return nil, fmt.Errorf("loading the sample configuration: %w", err)
	}
	g := &generator{docs: d}
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("key")
		if key == "" || key == "-" {
			continue
		}
		ft, fv := f.Type, v.Field(i)
		s := structOf(ft)
		if s == nil {
			return nil, fmt.Errorf("%s: a top-level key must hold a mapping or a list of mappings", key)
		}
		doc := join(keyed(d.fields["Config"][f.Name], f.Name, key), d.typeDoc(s, ft, key))
		if doc == "" {
			return nil, fmt.Errorf("%s has no doc comment", key)
		}
		sec := section{key: key, doc: doc}
		under := key
		if ft.Kind() == reflect.Slice {
			under += "[]"
			req, err := required([]step{{i}}, key)
			if err != nil {
				return nil, err
			}
			if req {
				sec.doc += " At least one is required."
			}
		}
		if err := g.walk(&sec, under, []step{{i}}, ft, fv); err != nil {
			return nil, err
		}
		g.sections = append(g.sections, sec)
	}
	return g.render(), nil
}

// structOf returns the struct type t holds (itself, through a pointer, or
// as the elements of a list), or nil.
func structOf(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Duration]() {
		return nil
	}
	return t
}

// walk adds a row for every key of the struct that t holds (v its value
// in the sample), under key.
func (g *generator) walk(sec *section, key string, steps []step, t reflect.Type, v reflect.Value) error {
	if t.Kind() == reflect.Slice {
		steps = append(slices.Clone(steps), step{elem})
		t = t.Elem()
		if v.Len() > 0 {
			v = v.Index(0)
		} else {
			v = reflect.New(t).Elem()
		}
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
		if v.IsNil() {
			v = reflect.New(t).Elem()
		} else {
			v = v.Elem()
		}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("key")
		if name == "" || name == "-" {
			continue
		}
		sub := key + "." + name
		fsteps := append(slices.Clone(steps), step{i})
		ft, fv := f.Type, v.Field(i)
		doc := keyed(g.docs.fields[t.Name()][f.Name], f.Name, name)
		s := structOf(ft)
		if s != nil {
			doc = join(doc, g.docs.typeDoc(s, ft, name))
		}
		if doc == "" {
			return fmt.Errorf("%s (%s.%s) has no doc comment", sub, t.Name(), f.Name)
		}
		probeKey := strings.ReplaceAll(sub, "[]", "[0]")
		r := row{key: sub, typ: typeName(ft), doc: doc}
		req, err := required(fsteps, probeKey)
		if err != nil {
			return err
		}
		switch {
		case req:
			r.def = "required"
		case s == nil:
			r.def = value(fv)
		case ft.Kind() != reflect.Struct: // a list or a pointer: none unless given
			r.def = "none"
		}
		if ft.Kind() == reflect.String || ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String {
			vals, err := allowed(fsteps, probeKey, ft)
			if err != nil {
				return err
			}
			if vals != nil {
				r.doc += " One of " + codeList(vals) + "."
			}
		}
		sec.rows = append(sec.rows, r)
		if s != nil {
			if ft.Kind() == reflect.Slice {
				sub += "[]"
			}
			if err := g.walk(sec, sub, fsteps, ft, fv); err != nil {
				return err
			}
		}
	}
	return nil
}

// typeDoc is the doc comment of struct type t, held by a key of type
// held, naming the key where it names the type: "Each entry" for an
// element of a list.
func (d *docs) typeDoc(t, held reflect.Type, key string) string {
	doc := keyed(d.types[t.Name()], t.Name(), key)
	if held.Kind() == reflect.Slice {
		doc = strings.Replace(doc, "`"+key+"`", "Each entry", 1)
	}
	return doc
}

// keyed turns a doc comment into one line, with the Go name it starts
// with, if it does, replaced by the key it documents.
func keyed(doc, goName, key string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	if rest, ok := strings.CutPrefix(doc, goName); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ",")) {
		doc = "`" + key + "`" + rest
	}
	return doc
}

func join(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + " " + b
}

// typeName names a key's type as the file spells its values.
func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[time.Duration]():
		return "duration"
	case reflect.TypeFor[config.Size]():
		return "size"
	case reflect.TypeFor[config.IdleClose]():
		return "duration or `never`"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Struct:
		return "mapping"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "list of mappings"
		}
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "mapping of " + typeName(t.Elem()) + "s"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	}
	panic("refgen: no name for " + t.String())
}

// value formats a default as it is written in the file.
func value(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "unset"
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		if x%time.Second == 0 {
			return "`" + strconv.FormatInt(int64(x/time.Second), 10) + "s`"
		}
		return "`" + x.String() + "`"
	case fmt.Stringer:
		return "`" + x.String() + "`"
	}
	switch v.Kind() {
	case reflect.Map:
		if v.IsNil() {
			return "none"
		}
		if v.Len() == 0 {
			return "`{}`"
		}
	case reflect.Slice:
		if v.IsNil() {
			return "none"
		}
		items := make([]string, v.Len())
		for i := range items {
			items[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return "`[" + strings.Join(items, ", ") + "]`"
	case reflect.String:
		if v.String() == "" {
			return "`\"\"`"
		}
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

func codeList(vals []string) string {
	q := make([]string, len(vals))
	for i, s := range vals {
		q[i] = "`" + s + "`"
	}
	return strings.Join(q, ", ")
}

// cell escapes text for a Markdown table cell, leaving code spans alone.
func cell(s string) string {
	var b strings.Builder
	code := false
	for _, r := range s {
		switch {
		case r == '`':
			code = !code
		case r == '|':
			b.WriteByte('\\')
		case !code && strings.ContainsRune(`*_<[]\`, r):
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pathRef is a file of the repository that a doc comment names, and the
// page links: docs/DRAIN.md, bench/README.md, examples/ebb.yaml.
var pathRef = regexp.MustCompile(`\b(?:docs/[A-Z][A-Z-]*\.md|bench/README\.md|examples/ebb\.yaml)\b`)

// linked makes each file that text names a link, relative to docs/, where the
// page is written.
func linked(text string) string {
	return pathRef.ReplaceAllStringFunc(text, func(path string) string {
		if rel, ok := strings.CutPrefix(path, "docs/"); ok {
			return "[" + path + "](" + rel + ")"
		}
		return "[" + path + "](../" + path + ")"
	})
}

func (g *generator) render() []byte {
	var b bytes.Buffer
	b.WriteString("<!-- Generated by go generate ./config from package config's doc comments and defaults (config/internal/refgen). DO NOT EDIT. -->\n\n")
	b.WriteString("# Configuration reference\n\n")
	// The package doc's first paragraph introduces the Go package; the
	// rest is the file's.
	_, intro, _ := strings.Cut(g.docs.pkg, "\n\n")
	var p comment.Parser
	pr := comment.Printer{HeadingLevel: 2, HeadingID: func(*comment.Heading) string { return "" }}
	b.WriteString(linked(string(pr.Markdown(p.Parse(intro)))))
	b.WriteString("\n")
	for _, s := range g.sections {
		b.WriteString("## " + s.key + "\n\n")
		b.WriteString(linked(s.doc) + "\n\n")
		b.WriteString("| key | type | default | what it does |\n|---|---|---|---|\n")
		for _, r := range s.rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, r.def, linked(cell(r.doc)))
		}
		b.WriteString("\n")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
