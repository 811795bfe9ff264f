package headers

import (
	"regexp"
	"strings"
	"testing"
)

var newID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestRequestID: what each policy does with the X-Request-Id a client
// sent (or did not), through both adapters. "new" stands for an id ebb
// made.
func TestRequestID(t *testing.T) {
	long := strings.Repeat("a", 129)
	cases := []struct {
		name   string
		policy RequestIDPolicy
		trust  bool
		lines  []string
		want   string // "new", the kept value, or "" for absent
	}{
		{"off, none", RequestIDOff, false, nil, ""},
		{"off keeps anything", RequestIDOff, false, []string{"a b"}, "a b"},
		{"trusted, none", RequestIDTrusted, true, nil, "new"},
		{"trusted peer's kept", RequestIDTrusted, true, []string{"abc-123"}, "abc-123"},
		{"untrusted peer's replaced", RequestIDTrusted, false, []string{"abc-123"}, "new"},
		{"any, kept", RequestIDAny, false, []string{"abc-123"}, "abc-123"},
		{"any, none", RequestIDAny, false, nil, "new"},
		{"128 characters kept", RequestIDAny, false, []string{long[:128]}, long[:128]},
		{"129 replaced", RequestIDAny, false, []string{long}, "new"},
		{"space replaced", RequestIDAny, false, []string{"a b"}, "new"},
		{"quote replaced", RequestIDAny, false, []string{`a"b`}, "new"},
		{"backslash replaced", RequestIDAny, false, []string{`a\b`}, "new"},
		{"non-ASCII replaced", RequestIDAny, false, []string{"caf\xc3\xa9"}, "new"},
		{"two lines replaced", RequestIDTrusted, true, []string{"a", "b"}, "new"},
		{"empty replaced", RequestIDAny, false, []string{""}, "new"},
	}
	for _, a := range adapters {
		for _, tc := range cases {
			t.Run(a.name+"/"+tc.name, func(t *testing.T) {
				raw := "Host: a\r\n"
				for _, l := range tc.lines {
					raw += "X-Request-Id: " + l + "\r\n"
				}
				h := a.run(t, raw, Hop{RequestID: tc.policy, Trust: tc.trust})
				got := h.Values(XRequestID)
				switch {
				case tc.want == "" && len(got) != 0:
					t.Errorf("X-Request-Id %q, want none", got)
				case tc.want == "new" && (len(got) != 1 || !newID.MatchString(got[0])):
					t.Errorf("X-Request-Id %q, want one new id", got)
				case tc.want != "" && tc.want != "new" && (len(got) != 1 || got[0] != tc.want):
					t.Errorf("X-Request-Id %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// TestNewRequestIDs: ids are version 4 UUIDs, and differ.
func TestNewRequestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := string(AppendNewRequestID(nil))
		if !newID.MatchString(id) || seen[id] {
			t.Fatalf("id %q: not a UUID, or seen before", id)
		}
		seen[id] = true
	}
}
