package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/localbus/localbus/ipc/client"
)

// subscriberTable prints streams with the processes that opened them, in
// aligned columns; withBus adds the bus each reads.
func subscriberTable(out io.Writer, subs []client.Subscriber, withBus bool, now time.Time) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "STREAM\tTRANSPORT\tPROCESS\tPID\tUID\tOPEN\tDELIVERED\tLAST ID\tQUEUED\tSLOW\tCONSUMER\tTYPES"
	if withBus {
		head = "BUS\t" + head
	}
	fmt.Fprintln(w, head)
	for _, s := range subs {
		if withBus {
			fmt.Fprintf(w, "%s\t", busText(s))
		}
		process, pid, uid := peerColumns(s)
		consumer := "-"
		if s.Consumer != nil {
			consumer = *s.Consumer
		}
		types := "*"
		if s.Types != nil {
			types = strings.Join(s.Types, ",")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.ID, s.Transport, process, pid, uid,
			durationText(now.Sub(s.Since)), s.Delivered, s.LastDeliveredID, s.Queued, yesNo(s.Slow), consumer, types)
	}
	w.Flush()
}

// consumerTable prints a session's consumers in aligned columns: name,
// ack mode, acknowledged id, events pending after it, whether a stream
// reads through it now, and how long ago it was last active.
func consumerTable(out io.Writer, consumers []client.Consumer, now time.Time) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CONSUMER\tACK\tACKED ID\tPENDING\tCONNECTED\tACTIVE")
	for _, c := range consumers {
		active := "-"
		if !c.LastActive.IsZero() {
			active = durationText(now.Sub(c.LastActive)) + " ago"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", c.Name, c.Ack, c.AckedID, c.Pending, yesNo(c.Connected), active)
	}
	w.Flush()
}

// peerColumns are the process, pid and uid columns of a stream: "-" where
// the caller may not see them; on TCP the key's name and the address.
func peerColumns(s client.Subscriber) (process, pid, uid string) {
	p := s.Peer
	switch {
	case p == nil:
		return "-", "-", "-"
	case p.Unix:
		name := p.Comm
		if name == "" {
			name = "?"
		}
		return name, strconv.Itoa(int(p.PID)), strconv.FormatUint(uint64(p.UID), 10)
	}
	key := p.Key
	if key == "" {
		key = "no key"
	}
	return "tcp " + p.Addr + " (" + key + ")", "-", "-"
}

// busText names the bus a stream reads.
func busText(s client.Subscriber) string {
	switch b := s.Bus; {
	case b == nil:
		return "-"
	case b.Session != "":
		return b.Session
	case b.Family != "":
		return "family " + b.Family
	}
	return "global"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// durationText is d rounded for people: 45s, 12m, 3h4m, 2d5h.
func durationText(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// rateText is an events/s figure for people.
func rateText(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}
