package main

import (
	"testing"
	"time"
)

// TestFlushTime: the spans left at exit are flushed within what is left
// of the drain's deadline, never beyond it, and at most maxFlush; not at
// all once it has passed; within a second when no drain was triggered.
func TestFlushTime(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		deadline time.Time
		drained  bool
		want     time.Duration
		ok       bool
	}{
		{name: "no drain", want: time.Second, ok: true},
		{name: "20s left", deadline: now.Add(20 * time.Second), drained: true, want: maxFlush, ok: true},
		{name: "3s left", deadline: now.Add(3 * time.Second), drained: true, want: 3 * time.Second, ok: true},
		{name: "200ms left", deadline: now.Add(200 * time.Millisecond), drained: true, want: 200 * time.Millisecond, ok: true},
		{name: "at the deadline", deadline: now, drained: true},
		{name: "past it", deadline: now.Add(-time.Second), drained: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := flushTime(tc.deadline, tc.drained, now)
			if got != tc.want || ok != tc.ok {
				t.Errorf("flushTime = %s, %v; want %s, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
