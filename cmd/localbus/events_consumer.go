package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// localbus events --consumer (SPEC §2.4, §9): the daemon keeps the
// position, so the command keeps none across runs. It learns the
// consumer's ack mode from stream:ready; under explicit it acknowledges
// each event once handled (the line written, or --exec's CMD exited 0),
// through an acker that sends the latest one while the next is handled.
// Within one run it never handles an event twice: a reconnection starts
// after the acknowledged id, which may be behind what it handled, and
// those events are skipped (and acknowledged again).

// An eventPoint is an event id in the epoch it belongs to.
type eventPoint struct {
	id    uint64
	epoch string
	ok    bool // false: none
}

// consumerFlags reads --consumer, --ack and --exec into f and opts, and
// refuses the combinations that make no sense.
func (f *follower) consumerFlags(c *cli.Context, opts *client.StreamOptions) error {
	if c.IsSet("exec") {
		if f.exec = c.String("exec"); strings.TrimSpace(f.exec) == "" {
			return usagef(c, "--exec needs a command")
		}
		if c.Bool("raw") || c.IsSet("format") {
			return usagef(c, "give --exec or --raw/--format, not both: --exec hands each event's JSON envelope to CMD on its stdin")
		}
	}
	name, mode := c.String("consumer"), c.String("ack")
	if name == "" {
		switch {
		case c.IsSet("consumer"):
			return usagef(c, "--consumer needs a name")
		case c.IsSet("ack"):
			return usagef(c, "--ack is a consumer's ack mode: give --consumer NAME too")
		}
		return nil
	}
	switch {
	case opts.Session == "":
		return usagef(c, "--consumer follows a session: give --session ID (family and global streams have no consumers)")
	case !grammar.ValidConsumer(name):
		return usagef(c, "--consumer %q: a consumer's name is a letter or digit, then up to %d letters, digits, '_', '.' or '-'", name, grammar.MaxConsumerName-1)
	case c.IsSet("tail"):
		return usagef(c, "give --tail or --consumer, not both: a consumer resumes where it stopped (--since places a new one)")
	}
	switch client.AckMode(mode) {
	case "":
		if f.exec != "" {
			mode = string(client.AckExplicit) // acknowledged once CMD exits 0
		}
	case client.AckAuto:
		if f.exec != "" {
			return usagef(c, "--exec acknowledges each event once CMD exits 0: its consumer is explicit, not --ack auto")
		}
	case client.AckExplicit:
	default:
		return usagef(c, "--ack must be auto or explicit, not %q", mode)
	}
	opts.Consumer, opts.Ack = name, client.AckMode(mode)
	f.consumer = name
	return nil
}

// checkNewConsumer refuses, before the stream creates the consumer there,
// a --since id above the session's last id (most likely Unix seconds), as
// checkIDs does when a stream without a consumer opens.
func (f *follower) checkNewConsumer(ctx context.Context, cl *client.Client) error {
	if f.since == nil || !f.since.isID {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	info, err := cl.Session(ctx, f.session)
	if err != nil {
		return nil // the stream says what is wrong
	}
	return f.checkIDs(bus.ReadyData{LastID: info.LastID, Epoch: info.Epoch})
}

// consumerNotice says on stderr, when the stream opens, which consumer it
// reads through and where it starts.
func (f *follower) consumerNotice(d bus.ReadyData) {
	cd := d.Consumer
	if cd == nil {
		return
	}
	what := fmt.Sprintf("consumer %q of session %q (%s acks)", cd.Name, f.session, cd.Ack)
	from := "from the first event the daemon holds"
	if cd.AckedID > 0 {
		from = fmt.Sprintf("after event %d", cd.AckedID)
	}
	if cd.Created {
		fmt.Fprintf(f.errw, "localbus: created %s; starting %s\n", what, from)
		return
	}
	fmt.Fprintf(f.errw, "localbus: following %s; resuming %s\n", what, from)
}

// seen reports whether this command handled the event at already: a
// consumer's reconnection replays what follows the acknowledged id. It
// acknowledges it again, in case the first acknowledgement was lost.
func (f *follower) seen(at eventPoint) bool {
	h := f.handled
	if f.consumer == "" || !h.ok || h.epoch != at.epoch || at.id > h.id {
		return false
	}
	if f.explicit {
		f.acks.add(h)
	}
	return true
}

// handledNow records that the event at was handled, and acknowledges it
// under explicit acks.
func (f *follower) handledNow(at eventPoint) {
	at.ok = true
	f.handled = at
	if f.explicit && f.acks != nil {
		f.acks.add(at)
	}
}

// handle prints the event, or hands it to --exec's CMD.
func (f *follower) handle(ctx context.Context, fr client.Frame) error {
	if f.exec != "" {
		return f.run(ctx, fr)
	}
	return f.print(fr)
}

// consumerError puts the refusals of a consumer's stream in the user's
// words, or returns nil for an error that is not one.
func (f *follower) consumerError(ctx context.Context, cl *client.Client, err error) error {
	if f.consumer == "" {
		return nil
	}
	what := fmt.Sprintf("consumer %q of session %q", f.consumer, f.session)
	if errors.Is(err, client.ErrReplaced) {
		return exitError{exitEnded, fmt.Errorf("another stream took %s over, or it was deleted; this one has stopped (starting it again would take the consumer back)", what)}
	}
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		return nil
	}
	existing, found := f.lookup(ctx, cl)
	switch ae.Code {
	case wire.CodeConsumerExists:
		where := "where it stopped"
		if found {
			where = fmt.Sprintf("after event %d", existing.AckedID)
		}
		return exitError{exitUsage, fmt.Errorf("%s exists: it resumes %s, and --since places only a new consumer; leave --since out, or choose another name (%s)", what, where, forgetHint(f.session, f.consumer))}
	case wire.CodeConsumerAckMode:
		mode := "the other ack mode"
		if found {
			mode = fmt.Sprintf("ack mode %s", existing.Ack)
		}
		if f.exec != "" {
			return exitError{exitUsage, fmt.Errorf("%s has %s, and --exec needs an explicit consumer, acknowledged once CMD exits 0; choose another name (%s)", what, mode, forgetHint(f.session, f.consumer))}
		}
		return exitError{exitUsage, fmt.Errorf("%s has %s, fixed when it was created; leave --ack out to use it, or choose another name", what, mode)}
	}
	return nil
}

// lookup returns the follower's consumer as the daemon lists it.
func (f *follower) lookup(ctx context.Context, cl *client.Client) (client.Consumer, bool) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	list, err := cl.Consumers(ctx, f.session)
	if err != nil {
		return client.Consumer{}, false
	}
	for _, c := range list {
		if c.Name == f.consumer {
			return c, true
		}
	}
	return client.Consumer{}, false
}

// forgetHint says how an admin forgets a consumer, to start it over.
func forgetHint(session, consumer string) string {
	return fmt.Sprintf(`an admin forgets it with: curl --unix-socket "$(localbus socket)" -X DELETE http://localbus%s`, wire.ConsumerPath(session, consumer))
}
