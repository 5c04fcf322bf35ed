package main

import (
	"context"
	"fmt"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/term"
	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/ipc/client"
)

// The top command is built on Bubble Tea, with Lip Gloss for its styles:
// its model's View is a plain function of the last snapshot, so the frame
// --once prints is the frame the terminal shows, drawn by the same code
// (topview.go); the library owns the terminal (raw mode, the alternate
// screen, resizes, keys), and the command never writes escape codes.

func topCommand() *cli.Command {
	return clientCommand(&cli.Command{
		Name:  "top",
		Usage: "a live view of the daemon: rates, sessions and slow streams",
		Description: "Shows the daemon at a glance (version, uptime, sessions, streams, events/s in and\n" +
			"out, memory and journal for admin), the sessions sorted by events/s, and the slow\n" +
			"or lagging streams with the process that opened them, refreshed every --interval.\n" +
			"Keys: q quits, s changes the sort, up and down select a session, Enter shows its\n" +
			"streams, Esc goes back. When stdout is not a terminal, or with --once, it prints one\n" +
			"plain frame and exits. A caller that is not admin sees its own streams' processes.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "refresh every `D`"},
			&cli.BoolFlag{Name: "once", Usage: "print one plain frame and exit"},
		},
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
				return err
			}
			if c.Duration("interval") < 100*time.Millisecond {
				return usagef(c, "--interval must be at least 100ms")
			}
			// The first snapshot is taken like any command's call, so an
			// unreachable daemon or a refusal exits with its code.
			var snap topSnapshot
			err := callDaemon(c, func(ctx context.Context, cl *client.Client) (err error) {
				snap, err = fetchTop(ctx, cl, "")
				return err
			})
			if err != nil {
				return err
			}
			f, isFile := c.App.Writer.(*os.File)
			if c.Bool("once") || !isFile || !term.IsTerminal(f.Fd()) {
				v := topView{width: 120}
				_, err = fmt.Fprint(c.App.Writer, v.render(snap, topTable{rows: snap.byRate, sel: -1}, "", false))
				return err
			}
			cl := newClient(c)
			defer cl.CloseIdleConnections()
			m := newTopModel(c.Context, cl, c.Duration("interval"))
			m.setSnapshot(snap)
			p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(c.Context), tea.WithOutput(f), tea.WithFPS(topFPS))
			if _, err := p.Run(); err != nil && c.Context.Err() == nil {
				return err
			}
			return nil
		},
	})
}

// topModel is the live view's state: the last snapshot, the sort, the
// selection and whether a session is drilled into.
type topModel struct {
	ctx      context.Context
	cl       *client.Client
	interval time.Duration
	snap     topSnapshot
	err      error    // the last refresh's, shown above the header
	table    topTable // the snapshot's sessions in order, sorted once per snapshot and sort
	selected string   // the selected session's id
	drill    bool     // showing the selected session's streams
	view     topView
}

type topTick struct{}

type topFetched struct {
	snap topSnapshot
	err  error
}

func newTopModel(ctx context.Context, cl *client.Client, interval time.Duration) *topModel {
	return &topModel{ctx: ctx, cl: cl, interval: interval, view: topView{width: 80, height: 24, styled: true}}
}

func (m *topModel) Init() tea.Cmd { return m.fetch() }

// fetch asks the daemon for a snapshot, bounded by the interval (at least
// a few seconds, for a busy daemon).
func (m *topModel) fetch() tea.Cmd {
	drill := ""
	if m.drill {
		drill = m.selected
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, max(5*time.Second, 2*m.interval))
		defer cancel()
		snap, err := fetchTop(ctx, m.cl, drill)
		return topFetched{snap, err}
	}
}

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.view.width, m.view.height = msg.Width, msg.Height
	case topFetched:
		m.err = msg.err
		if msg.err == nil {
			m.setSnapshot(msg.snap)
		}
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return topTick{} })
	case topTick:
		return m, m.fetch()
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c":
			return m, tea.Quit
		case "s":
			m.table.sort = (m.table.sort + 1) % topSortCount
			m.reorder()
		case "up", "k":
			m.move(-1)
		case "down", "j":
			m.move(1)
		case "enter":
			if m.selected != "" {
				m.drill = true
				return m, m.fetch()
			}
		case "esc", "backspace":
			m.drill = false
		}
	}
	return m, nil
}

// setSnapshot shows snap.
func (m *topModel) setSnapshot(snap topSnapshot) {
	m.snap = snap
	m.reorder()
}

// reorder sorts the snapshot's sessions in the table's order and keeps
// the selected session, or selects the first when it is gone.
func (m *topModel) reorder() {
	t := &m.table
	if t.sort == topSortRate {
		t.rows = m.snap.byRate
	} else {
		t.rows = m.snap.order(t.sort)
	}
	t.sel = -1
	for i, r := range t.rows {
		if m.snap.sessions[r].ID == m.selected {
			t.sel = i
			break
		}
	}
	if t.sel < 0 && len(t.rows) > 0 {
		t.sel = 0
	}
	m.selected = ""
	if t.sel >= 0 {
		m.selected = m.snap.sessions[t.rows[t.sel]].ID
	}
}

// move moves the selection by d rows in the current order.
func (m *topModel) move(d int) {
	t := &m.table
	if len(t.rows) == 0 {
		return
	}
	t.sel = min(max(t.sel+d, 0), len(t.rows)-1)
	m.selected = m.snap.sessions[t.rows[t.sel]].ID
}

func (m *topModel) View() string {
	out := m.view.render(m.snap, m.table, m.selected, m.drill)
	if m.err != nil {
		out = m.view.errLine(m.err) + out
	}
	return out
}

// topFPS bounds how often the terminal is redrawn: a key shows within
// 50 ms, and an idle view wakes 20 times a second to learn that nothing
// changed, not Bubble Tea's default of 60.
const topFPS = 20
