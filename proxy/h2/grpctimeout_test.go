package h2

import (
	"testing"
	"time"
)

func TestGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true},
		{"100m", 100 * time.Millisecond, true},
		{"99999999u", 99999999 * time.Microsecond, true},
		{"2H", 2 * time.Hour, true},
		{"5M", 5 * time.Minute, true},
		{"10n", 10, true},
		{"", 0, false},
		{"S", 0, false},
		{"123456789S", 0, false}, // nine digits
		{"1x", 0, false},
		{"-1S", 0, false},
		{"1.5S", 0, false},
	} {
		got, ok := grpcTimeout([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("grpcTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
