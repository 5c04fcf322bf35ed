package main

import (
	"fmt"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
)

// describe puts a reserved frame in plain words for stderr, or returns ""
// for frames that are routine. readies counts the stream:ready frames so
// far, this one included: the first one is the stream opening, later ones
// are reconnections.
func describe(f client.Frame, readies int) string {
	switch f.Type {
	case bus.TypeReady:
		if readies <= 1 {
			return ""
		}
		var d bus.ReadyData
		if f.DecodeData(&d) != nil || d.Cursor == nil {
			return "reconnected"
		}
		return fmt.Sprintf("reconnected; resuming after event %d", *d.Cursor)
	case bus.TypeGap:
		var d bus.GapData
		if f.DecodeData(&d) != nil {
			return "gap: some events are no longer available"
		}
		return describeGap(d)
	case bus.TypeSlow:
		d := frameData[bus.SlowData](f)
		return fmt.Sprintf("warning: falling behind: %d of at most %d events wait at the daemon for this reader", d.Queued, d.MaxQueued)
	case bus.TypeLagged:
		d := frameData[bus.LaggedData](f)
		why := fmt.Sprintf("%d events were waiting unread (the limit is %d)", d.QueueSize, d.MaxQueued)
		if d.Reason == bus.LagQueueBytesOverflow {
			why = fmt.Sprintf("%s of events were waiting unread (the limit is %s)", bytesText(d.QueuedBytes), bytesText(d.MaxQueuedBytes))
		}
		return "the daemon dropped this stream because it fell behind: " + why + "; reconnecting to catch up"
	case bus.TypeError:
		d := frameData[bus.ErrorData](f)
		return fmt.Sprintf("the daemon refused the stream (%s: %s); retrying", d.Code, d.Message)
	case bus.TypeClosed:
		d := frameData[bus.ClosedData](f)
		switch d.Reason {
		case string(bus.EndShutdown):
			return "the daemon is shutting down; reconnecting when it is back"
		case string(bus.EndReload):
			return "the daemon is reloading its configuration; reconnecting"
		case string(bus.EndSessionDeleted), string(bus.EndReplaced):
			return "" // final: the command's error says it
		}
		return fmt.Sprintf("the daemon closed the stream (%s); reconnecting", d.Reason)
	}
	return "" // stream:replayed, and frames of newer daemons
}

// frameData returns the data of f decoded as a T, or the zero T when it
// does not decode: a description then says what it can without it.
func frameData[T any](f client.Frame) T {
	var d T
	f.DecodeData(&d)
	return d
}

// describeGap explains which events a stream:gap says are lost.
func describeGap(d bus.GapData) string {
	next := "continuing with new events"
	if d.EarliestAvailableID != nil {
		next = fmt.Sprintf("continuing from %d", *d.EarliestAvailableID)
	}
	if d.Reason == bus.GapUpstreamLost {
		ids := fmt.Sprintf("events %d–%d", d.OriginFrom, d.OriginTo)
		if d.OriginFrom == d.OriginTo {
			ids = fmt.Sprintf("event %d", d.OriginFrom)
		}
		return fmt.Sprintf("gap: the origin of this mirror lost %s of its session before they reached this daemon; %s", ids, next)
	}
	if d.Reason == bus.GapEpochReset {
		return fmt.Sprintf("gap: the bus restarted its event ids (a new epoch: the daemon restarted without keeping events, or the session was recreated); events after %d of the old sequence that were not printed are lost; %s of the new sequence",
			d.LastDeliveredID, next)
	}
	first, last := d.LastDeliveredID+1, d.LastID
	if d.EarliestAvailableID != nil {
		last = *d.EarliestAvailableID - 1
	}
	switch {
	case last < first:
		return "gap: some events are no longer available; " + next
	case last == first:
		return fmt.Sprintf("gap: event %d is no longer available (the daemon's ring evicted it); %s", first, next)
	}
	return fmt.Sprintf("gap: events %d–%d are no longer available (the daemon's ring evicted them); %s", first, last, next)
}

// bytesText writes a byte count for people.
func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
