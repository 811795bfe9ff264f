package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a number of bytes, written as 65536, 64KiB, 1MiB, 1GiB (binary) or
// 64KB, 1MB (decimal).
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so that "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

// ParseSize reads a size such as "64KiB".
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("expected a size such as 65536, 64KiB or 1MiB, got %q", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

// String formats the size the way it is best written in a file.
func (s Size) String() string {
	switch {
	case s != 0 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s>>30), 10) + "GiB"
	case s != 0 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s>>20), 10) + "MiB"
	case s != 0 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s>>10), 10) + "KiB"
	}
	return strconv.FormatInt(int64(s), 10)
}

func (s *Size) decode(v any) error {
	switch x := v.(type) {
	case int:
		if x < 0 {
			return fmt.Errorf("expected a size such as 65536, 64KiB or 1MiB, got %d", x)
		}
		*s = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		if err != nil {
			return err
		}
		*s = n
		return nil
	}
	return fmt.Errorf("expected a size such as 65536, 64KiB or 1MiB, got %s", describe(v))
}

// IdleClose is drain.http1.idle_close: a duration, or Never.
type IdleClose time.Duration

// Never keeps idle HTTP/1 connections open until the drain deadline.
const Never IdleClose = -1

// String formats the value as it is written in a file.
func (d IdleClose) String() string {
	if d == Never {
		return "never"
	}
	return time.Duration(d).String()
}

func (d *IdleClose) decode(v any) error {
	if s, ok := v.(string); ok && strings.EqualFold(strings.TrimSpace(s), "never") {
		*d = Never
		return nil
	}
	dur, err := decodeDuration(v)
	if err != nil {
		return fmt.Errorf("%w, or never", err)
	}
	*d = IdleClose(dur)
	return nil
}

func decodeDuration(v any) (time.Duration, error) {
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil || d < 0 {
			return 0, fmt.Errorf("expected a duration such as 500ms, 2s or 1m, got %q", x)
		}
		return d, nil
	case int:
		if x == 0 { // a bare 0 is unambiguous
			return 0, nil
		}
	}
	return 0, fmt.Errorf("expected a duration such as 500ms, 2s or 1m, got %s", describe(v))
}

// describe names a decoded YAML value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case bool:
		return "boolean " + strconv.FormatBool(x)
	}
	return fmt.Sprintf("%v", v)
}
