package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

// eventIDs reads frames until it has n events, and returns their ids.
func eventIDs(t *testing.T, st *client.Stream, n int) []uint64 {
	t.Helper()
	var ids []uint64
	for len(ids) < n {
		if f := next(t, st); !f.Reserved() {
			ids = append(ids, f.ID)
		}
	}
	return ids
}

// TestAConsumersStreamResumesAfterItsAck: a stream through an explicit
// consumer starts, after a reload, after its last ack (at least once:
// what was not acknowledged comes again), sends no start point again, and
// a new stream of the consumer that names one is refused.
func TestAConsumersStreamResumesAfterItsAck(t *testing.T) {
	for _, tr := range []client.Transport{client.SSE, client.WebSocket} {
		t.Run(string(tr), func(t *testing.T) {
			d, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s", "a:x", 3)
			st := openStream(t, c, client.StreamOptions{Session: "s", Consumer: "svc", Ack: client.AckExplicit, Since: ptr(uint64(1)), Transport: tr})
			ready := nextOf(t, st, bus.TypeReady)
			var rd bus.ReadyData
			ready.DecodeData(&rd)
			if rd.Consumer == nil || !rd.Consumer.Created || rd.Consumer.AckedID != 1 || rd.Consumer.Ack != "explicit" {
				t.Fatalf("stream:ready consumer %+v", rd.Consumer)
			}
			if ids := eventIDs(t, st, 2); !slices.Equal(ids, []uint64{2, 3}) {
				t.Fatalf("ids %v, want [2 3]", ids)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := st.Ack(ctx, 2); err != nil {
				t.Fatalf("Ack(2): %v", err)
			}
			d.hub.EndStreams(bus.EndReload)
			nextOf(t, st, bus.TypeClosed)
			ready = nextOf(t, st, bus.TypeReady)
			ready.DecodeData(&rd)
			if rd.Consumer == nil || rd.Consumer.Created || rd.Consumer.AckedID != 2 {
				t.Fatalf("after the reload, stream:ready consumer %+v", rd.Consumer)
			}
			if ids := eventIDs(t, st, 1); !slices.Equal(ids, []uint64{3}) {
				t.Fatalf("after the reload ids %v, want [3] again", ids)
			}
			if id, _, _ := st.Cursor(); id != 3 {
				t.Errorf("Cursor = %d, want 3", id)
			}
			_, err := c.Stream(ctx, client.StreamOptions{Session: "s", Consumer: "svc", Since: ptr(uint64(0)), Transport: tr})
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Code != wire.CodeConsumerExists || !errors.Is(err, client.ErrConflict) {
				t.Errorf("a stream that names a start of an existing consumer: %v, want 409 consumer_exists", err)
			}
		})
	}
}

// TestATakenOverStreamEndsWithErrReplaced: the stream whose consumer
// another took over returns stream:closed, then an *EndedError that
// unwraps to ErrReplaced, for good.
func TestATakenOverStreamEndsWithErrReplaced(t *testing.T) {
	for _, tr := range []client.Transport{client.SSE, client.WebSocket} {
		t.Run(string(tr), func(t *testing.T) {
			_, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s", "a:x", 1)
			first := openStream(t, c, client.StreamOptions{Session: "s", Consumer: "svc", Transport: tr})
			nextOf(t, first, bus.TypeReplayed)
			second := openStream(t, c, client.StreamOptions{Session: "s", Consumer: "svc", Transport: tr})
			nextOf(t, second, bus.TypeReady)
			f := nextOf(t, first, bus.TypeClosed)
			var cd bus.ClosedData
			f.DecodeData(&cd)
			if cd.Reason != "replaced" || cd.RetryMs != 0 {
				t.Errorf("stream:closed %+v", cd)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			for range 2 {
				_, err := first.Next(ctx)
				var ee *client.EndedError
				if !errors.Is(err, client.ErrReplaced) || !errors.As(err, &ee) || ee.Reason != "replaced" {
					t.Fatalf("Next after the takeover: %v, want an *EndedError that unwraps to ErrReplaced", err)
				}
			}
			publishN(t, c, "s", "a:x", 1)
			// It starts after what the first stream's writer had reported
			// when it took over: 1 may come again (at least once).
			for f := nextOf(t, second, "a:x"); f.ID != 2; f = nextOf(t, second, "a:x") {
				if f.ID != 1 {
					t.Fatalf("the stream that took over got %d, want 1 or 2", f.ID)
				}
			}
		})
	}
}

// TestConsumerCalls: Consumers lists, Ack with another epoch is refused
// (409 epoch_mismatch, ErrConflict) and moves nothing, DeleteConsumer
// forgets one (and ends its stream), an auto consumer refuses Ack.
func TestConsumerCalls(t *testing.T) {
	_, c := startDaemonClient(t, bus.Limits{})
	publishN(t, c, "s", "a:x", 3)
	st := openStream(t, c, client.StreamOptions{Session: "s", Consumer: "svc", Ack: client.AckExplicit})
	nextOf(t, st, bus.TypeReplayed)
	_, epoch, _ := st.Cursor()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if id, err := c.Ack(ctx, "s", "svc", 2, epoch); err != nil || id != 2 {
		t.Fatalf("Ack(2) = %d, %v", id, err)
	}
	_, err := c.Ack(ctx, "s", "svc", 3, "an-old-epoch")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != wire.CodeEpochMismatch || !errors.Is(err, client.ErrConflict) {
		t.Errorf("Ack with another epoch: %v, want 409 epoch_mismatch", err)
	}
	if _, err := c.Ack(ctx, "s", "svc", 4, epoch); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Errorf("Ack above lastId: %v, want 400", err)
	}
	auto := openStream(t, c, client.StreamOptions{Session: "s", Consumer: "tail"})
	nextOf(t, auto, bus.TypeReplayed)
	if err := auto.Ack(ctx, 1); !errors.As(err, &ae) || ae.Code != wire.CodeConsumerNotExplicit {
		t.Errorf("Ack of an auto consumer: %v, want 409 consumer_not_explicit", err)
	}
	list, err := c.Consumers(ctx, "s")
	if err != nil || len(list) != 2 || list[0].Name != "svc" || list[0].AckedID != 2 || list[0].Pending != 1 || !list[0].Connected || list[1].Name != "tail" {
		t.Fatalf("Consumers = %+v, %v", list, err)
	}
	if err := c.DeleteConsumer(ctx, "s", "svc"); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Next(ctx); err != nil {
			if !errors.Is(err, client.ErrReplaced) {
				t.Errorf("the deleted consumer's stream ended with %v, want ErrReplaced", err)
			}
			break
		}
	}
	if err := c.DeleteConsumer(ctx, "s", "svc"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DeleteConsumer again: %v, want ErrNotFound", err)
	}
	if _, err := c.Stream(ctx, client.StreamOptions{Family: "a", Consumer: "x"}); err == nil {
		t.Error("a family stream with a consumer was opened")
	}
	if _, err := c.Stream(ctx, client.StreamOptions{Session: "s", Ack: client.AckExplicit}); err == nil {
		t.Error("a stream with an ack mode and no consumer was opened")
	}
}
