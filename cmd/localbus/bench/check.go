package bench

import (
	"fmt"
	"strings"
)

// Check is what a run's subscribers received, held against what was
// published: every subscriber must get every event once, in order.
type Check struct {
	// Subscribers is the number of subscribers checked.
	Subscribers int `json:"subscribers"`
	// Expected is the number of deliveries due: events × subscribers.
	Expected uint64 `json:"expected"`
	// Received counts distinct due events received, over every subscriber.
	Received uint64 `json:"received"`
	// Lost is Expected − Received.
	Lost uint64 `json:"lost"`
	// Duplicates counts events received again by the same subscriber.
	Duplicates uint64 `json:"duplicates"`
	// OutOfOrder counts events received after a higher id.
	OutOfOrder uint64 `json:"outOfOrder"`
	// Unexpected counts events with ids outside the published range
	// (someone else published on the bench's session).
	Unexpected uint64 `json:"unexpected"`
	// Reconnects counts streams reopened with Last-Event-ID after the
	// server ended them (stream:lagged, stream:closed, a dropped
	// connection).
	Reconnects int `json:"reconnects"`
	// Lagged, Slow and Gaps count stream:lagged, stream:slow and
	// stream:gap frames.
	Lagged int `json:"lagged"`
	Slow   int `json:"slow"`
	Gaps   int `json:"gaps"`
}

// OK reports whether every subscriber got every event once, in order.
func (c Check) OK() bool {
	return c.Lost == 0 && c.Duplicates == 0 && c.OutOfOrder == 0 && c.Received == c.Expected
}

// Problem describes what went wrong in words, "" when OK.
func (c Check) Problem() string {
	if c.OK() {
		return ""
	}
	var parts []string
	add := func(n uint64, one, many string) {
		switch {
		case n == 1:
			parts = append(parts, "1 "+one)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	add(c.Lost, "event lost", "events lost")
	add(c.Duplicates, "duplicate", "duplicates")
	add(c.OutOfOrder, "event out of order", "events out of order")
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%d of %d deliveries received", c.Received, c.Expected))
	}
	return strings.Join(parts, ", ")
}

func (c *Check) add(o Check) {
	c.Subscribers += o.Subscribers
	c.Expected += o.Expected
	c.Received += o.Received
	c.Lost += o.Lost
	c.Duplicates += o.Duplicates
	c.OutOfOrder += o.OutOfOrder
	c.Unexpected += o.Unexpected
	c.Reconnects += o.Reconnects
	c.Lagged += o.Lagged
	c.Slow += o.Slow
	c.Gaps += o.Gaps
}

// sequence checks one subscriber's ids against the range base+1 … base+n.
// It is not safe for concurrent use.
type sequence struct {
	base, n uint64
	seen    []uint64 // bit i: id base+1+i received
	check   Check
	last    uint64 // the highest due id received
}

func newSequence(base, n uint64) *sequence {
	return &sequence{base: base, n: n, seen: make([]uint64, (n+63)/64), check: Check{Subscribers: 1, Expected: n}}
}

// add records id and reports whether it was new and due.
func (q *sequence) add(id uint64) bool {
	if id <= q.base || id > q.base+q.n {
		q.check.Unexpected++
		return false
	}
	i := id - q.base - 1
	w, bit := i/64, uint64(1)<<(i%64)
	if q.seen[w]&bit != 0 {
		q.check.Duplicates++
		return false
	}
	q.seen[w] |= bit
	q.check.Received++
	if id < q.last {
		q.check.OutOfOrder++
	} else {
		q.last = id
	}
	return true
}

// complete reports whether every due id was received.
func (q *sequence) complete() bool { return q.check.Received == q.n }

// result returns the check with Lost filled in.
func (q *sequence) result() Check {
	c := q.check
	c.Lost = c.Expected - c.Received
	return c
}
