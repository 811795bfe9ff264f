package config

import (
	"reflect"
	"time"
)

// Map renders the configuration as a tree keyed like the file, with every
// default filled in. Fields tagged secret:"true" are replaced by
// "[redacted]", so the result is safe to show on the admin server.
func (c *Config) Map() map[string]any {
	return encode(reflect.ValueOf(c).Elem()).(map[string]any)
}

func encode(v reflect.Value) any {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	if s, ok := v.Interface().(interface{ String() string }); ok && v.Kind() != reflect.Struct && v.Kind() != reflect.Pointer {
		return s.String()
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return encode(v.Elem())
	case reflect.Struct:
		m := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			k := f.Tag.Get("key")
			if k == "" || k == "-" {
				continue
			}
			if f.Tag.Get("secret") == "true" && !v.Field(i).IsZero() {
				m[k] = "[redacted]"
				continue
			}
			m[k] = encode(v.Field(i))
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = encode(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
