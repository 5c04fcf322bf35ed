package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/localbus/localbus/ipc/client"
)

// topSnapshot is what one refresh of top fetched.
type topSnapshot struct {
	at     time.Time
	addr   string
	status client.Status
	// sessions are every session, in id order as the daemon lists them;
	// byRate their indexes by events/s, sorted once, at the fetch.
	sessions []client.SessionInfo
	byRate   []int32
	// streams are every stream for an admin caller; for another, its own
	// streams (those whose peer it may see) of the busiest sessions.
	streams []client.Subscriber
	admin   bool
	// lags are the slowest lag (frames queued) of each session's streams.
	lags map[string]int
	// drill are the streams of the session drilled into.
	drill []client.Subscriber
}

// topStreamSessions bounds the sessions whose streams a caller that is
// not admin asks for, one request each.
const topStreamSessions = 20

// fetchTop takes a snapshot; drill names a session whose streams to list
// too ("" for none).
func fetchTop(ctx context.Context, cl *client.Client, drill string) (topSnapshot, error) {
	snap := topSnapshot{at: time.Now(), addr: cl.Addr()}
	var err error
	if snap.status, err = cl.Status(ctx); err != nil {
		return snap, err
	}
	if snap.sessions, err = cl.Sessions(ctx); err != nil {
		return snap, err
	}
	snap.byRate = snap.order(topSortRate)
	snap.streams, err = cl.AllSubscribers(ctx)
	snap.admin = err == nil
	if errors.Is(err, client.ErrForbidden) {
		// The busiest sessions with streams, one request each.
		snap.streams, err = nil, nil
		asked := 0
		for _, i := range snap.byRate {
			s := &snap.sessions[i]
			if asked == topStreamSessions {
				break
			}
			if s.Subscribers == 0 {
				continue
			}
			asked++
			subs, err := cl.Subscribers(ctx, s.ID)
			if errors.Is(err, client.ErrNotFound) {
				continue
			}
			if err != nil {
				return snap, err
			}
			for _, sub := range subs {
				if sub.Peer != nil {
					sub.Bus = &client.SubscriberBus{Session: s.ID}
					snap.streams = append(snap.streams, sub)
				}
			}
		}
	}
	if err != nil {
		return snap, err
	}
	snap.lags = map[string]int{}
	for _, s := range snap.streams {
		if s.Bus != nil && s.Bus.Session != "" {
			snap.lags[s.Bus.Session] = max(snap.lags[s.Bus.Session], s.Queued)
		}
	}
	if drill != "" {
		if snap.drill, err = cl.Subscribers(ctx, drill); errors.Is(err, client.ErrNotFound) {
			err = nil
		}
	}
	return snap, err
}

// topSort is the order of the sessions table.
type topSort int

const (
	topSortRate        topSort = iota // events/s in, then out
	topSortDeliver                    // events/s out
	topSortSubscribers                // streams
	topSortID                         // id
	topSortCount
)

func (s topSort) String() string {
	return [...]string{"events/s in", "events/s out", "subscribers", "id"}[s]
}

// order returns the indexes of the sessions in order s; equals stay in
// id order, the order they are listed in.
func (snap topSnapshot) order(s topSort) []int32 {
	rows := make([]int32, len(snap.sessions))
	for i := range rows {
		rows[i] = int32(i)
	}
	ss := snap.sessions
	switch s {
	case topSortRate:
		slices.SortStableFunc(rows, func(i, j int32) int {
			return cmp.Or(cmp.Compare(ss[j].PublishRate, ss[i].PublishRate), cmp.Compare(ss[j].DeliverRate, ss[i].DeliverRate))
		})
	case topSortDeliver:
		slices.SortStableFunc(rows, func(i, j int32) int { return cmp.Compare(ss[j].DeliverRate, ss[i].DeliverRate) })
	case topSortSubscribers:
		slices.SortStableFunc(rows, func(i, j int32) int { return cmp.Compare(ss[j].Subscribers, ss[i].Subscribers) })
	}
	return rows
}

// topTable is the sessions table of a snapshot: its sort, the sessions'
// indexes in that order, and the selected row (-1: none).
type topTable struct {
	sort topSort
	rows []int32
	sel  int
}

// topView draws a snapshot in a width × height terminal (height 0: no
// bound, for --once); styled draws the header bold and the selection in
// reverse video, with Lip Gloss.
type topView struct {
	width, height int
	styled        bool
}

var (
	topBold     = lipgloss.NewStyle().Bold(true)
	topSelected = lipgloss.NewStyle().Reverse(true)
	topWarn     = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
)

func (v topView) errLine(err error) string {
	return v.fit(v.style(topWarn, "refresh failed: "+err.Error())) + "\n"
}

func (v topView) style(s lipgloss.Style, text string) string {
	if !v.styled {
		return text
	}
	return s.Render(text)
}

// fit cuts a line to the terminal's width.
func (v topView) fit(line string) string {
	if v.width <= 0 {
		return line
	}
	return ansi.Truncate(line, v.width, "")
}

// table renders rows of tab-separated cells in aligned columns.
func table(rows []string) []string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	w.Flush()
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// render draws the frame: the header, then the sessions (or, drilled in,
// the selected session's streams), then the slow and lagging streams.
func (v topView) render(snap topSnapshot, t topTable, selected string, drill bool) string {
	st := snap.status
	var out []string
	add := func(line string) { out = append(out, v.fit(line)) }
	add(v.style(topBold, fmt.Sprintf("localbus %s at %s, up %s", st.Version, snap.addr, durationText(snap.at.Sub(st.StartedAt)))))
	head := fmt.Sprintf("%s, %s, %s; events/s %s in, %s out", plural(st.Sessions, "session"), plural(st.Streams, "stream"),
		plural(st.Consumers, "consumer"), rateText(st.PublishRate), rateText(st.DeliverRate))
	if st.RSSBytes != nil {
		head += "; RSS " + bytesText(*st.RSSBytes)
	}
	if st.JournalBytes != nil {
		head += "; journal " + bytesText(*st.JournalBytes)
	}
	if st.Upstream != nil {
		head += fmt.Sprintf("; upstream lag %d", st.Upstream.Lag)
	}
	add(head)
	add("")

	slow := v.slowRows(snap)
	budget := -1 // rows left for the middle table; -1 without a bound
	if v.height > 0 {
		// Below the rows: "… N more", a blank line, the slow streams'
		// title and at most 6 of their lines; above them a title and the
		// table's header; one line spare for a refresh error.
		budget = max(v.height-len(out)-2-3-max(min(len(slow), 6), 1)-1, 3)
	}
	if drill {
		add(v.style(topBold, fmt.Sprintf("streams of session %s (Esc: back)", selected)))
		rows := []string{"STREAM\tTRANSPORT\tPROCESS\tPID\tUID\tOPEN\tDELIVERED\tLAST ID\tQUEUED\tSLOW\tTYPES"}
		for _, s := range snap.drill {
			process, pid, uid := peerColumns(s)
			types := "*"
			if s.Types != nil {
				types = strings.Join(s.Types, ",")
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s", s.ID, s.Transport, process, pid, uid,
				durationText(snap.at.Sub(s.Since)), s.Delivered, s.LastDeliveredID, s.Queued, yesNo(s.Slow), types))
		}
		for i, line := range table(rows) {
			if budget >= 0 && i > budget {
				add(fmt.Sprintf("… %d more", len(rows)-i))
				break
			}
			add(line)
		}
	} else {
		// Only the rows that show are formatted: a window that keeps the
		// selection in sight.
		first, n := 0, len(t.rows)
		if budget >= 0 && n > budget {
			n = budget
			if t.sel >= budget {
				first = t.sel - budget + 1
			}
		}
		rows := []string{"SESSION\tLAST ID\tIN/S\tOUT/S\tSUBS\tCONSUMERS\tLAG\tRING"}
		for _, i := range t.rows[first : first+n] {
			s := &snap.sessions[i]
			fill := 0.0
			if s.Ring.MaxCount > 0 {
				fill = 100 * float64(s.Ring.Count) / float64(s.Ring.MaxCount)
			}
			lag := "-"
			if n, ok := snap.lags[s.ID]; ok {
				lag = fmt.Sprint(n)
			}
			rows = append(rows, fmt.Sprintf("%s\t%d\t%s\t%s\t%d\t%d\t%s\t%.0f%%", s.ID, s.LastID, rateText(s.PublishRate),
				rateText(s.DeliverRate), s.Subscribers, s.Consumers, lag, fill))
		}
		add(v.style(topBold, fmt.Sprintf("sessions by %s (s: sort, Enter: streams, q: quit)", t.sort)))
		for i, line := range table(rows) {
			if i > 0 && first+i-1 == t.sel && v.styled {
				line = v.style(topSelected, line)
			}
			add(line)
		}
		if rest := len(t.rows) - first - n; rest > 0 || first > 0 {
			add(fmt.Sprintf("… %d more (%d above)", rest, first))
		}
	}
	add("")
	title := "slow or lagging streams"
	if !snap.admin {
		title += " (your own; admin sees every stream)"
	}
	add(v.style(topBold, title))
	if len(slow) == 1 {
		add("none")
	}
	for i, line := range table(slow) {
		if len(slow) == 1 {
			break
		}
		if v.height > 0 && len(out) >= v.height-1 {
			add(fmt.Sprintf("… %d more", len(slow)-i))
			break
		}
		add(line)
	}
	return strings.Join(out, "\n") + "\n"
}

// slowRows are the table of the streams that are slow or have frames
// queued, the most behind first, with their processes; the first row is
// the header.
func (v topView) slowRows(snap topSnapshot) []string {
	var lagging []client.Subscriber
	for _, s := range snap.streams {
		if s.Slow || s.Queued > 0 {
			lagging = append(lagging, s)
		}
	}
	slices.SortStableFunc(lagging, func(a, b client.Subscriber) int { return cmp.Compare(b.Queued, a.Queued) })
	rows := []string{"BUS\tSTREAM\tPROCESS\tPID\tQUEUED\tBYTES\tSLOW\tLAST ID"}
	for _, s := range lagging {
		process, pid, _ := peerColumns(s)
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d", busText(s), s.ID, process, pid, s.Queued,
			bytesText(s.QueuedBytes), yesNo(s.Slow), s.LastDeliveredID))
	}
	return rows
}
