package client

import "testing"

func TestBackoffDoublesWithinJitterUpToTheCap(t *testing.T) {
	s := &Stream{base: minBackoff, opts: StreamOptions{MaxBackoff: defaultMaxBackoff}}
	for failures, want := range map[int]struct{ lo, hi int64 }{
		1:  {125, 250},
		2:  {250, 500},
		3:  {500, 1000},
		7:  {8000, 16000},
		8:  {15000, 30000},
		30: {15000, 30000},
	} {
		s.failures = failures
		for range 100 {
			if d := s.backoff().Milliseconds(); d < want.lo || d > want.hi {
				t.Fatalf("backoff after %d failures = %dms, want %d..%dms", failures, d, want.lo, want.hi)
			}
		}
	}
}
