package daemon

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/localbus/localbus/ipc/wire"
)

// sampleRates takes the hub's one-second samples for the rates of GET
// /api/v1/sessions and /api/v1/status until ctx is done.
func (d *Daemon) sampleRates(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	d.hub.SampleRates(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.hub.SampleRates(now)
		}
	}
}

// adminStatus is what GET /api/v1/status adds for an admin caller.
func (d *Daemon) adminStatus() wire.AdminStatus {
	var a wire.AdminStatus
	if rss, ok := residentBytes(); ok {
		a.RSSBytes = &rss
	}
	if d.journal != nil {
		n := d.journal.Stats().BytesOnDisk
		a.JournalBytes = &n
	}
	if d.upstream != nil {
		st := d.upstream.Status()
		a.Upstream = &wire.StatusUpstream{Connected: st.Connected, Lag: st.Lag}
	}
	return a
}

// residentBytes returns the process's resident set size, from
// /proc/self/statm; ok is false where there is none.
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}
