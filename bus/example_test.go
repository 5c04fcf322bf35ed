package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/localbus/localbus/bus"
)

// A client that last saw id 1 resumes: it gets what it missed, then
// stream:replayed, then live events.
func Example() {
	// Input is parsed where it comes in; the bus takes the values.
	id, err := bus.ParseSessionID("build-17")
	if err != nil {
		panic(err)
	}
	step, err := bus.ParseType("build:step")
	if err != nil {
		panic(err)
	}
	done, err := bus.ParseType("build:done")
	if err != nil {
		panic(err)
	}
	b, err := bus.New(bus.Options{Session: id})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	b.Publish(bus.Event{Type: step, Data: json.RawMessage(`{"n":1}`)})
	b.Publish(bus.Event{Type: step, Data: json.RawMessage(`{"n":2}`)})

	cursor := uint64(1)
	s, err := b.Subscribe(context.Background(), bus.SubscribeOptions{Cursor: &cursor})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	b.Publish(bus.Event{Type: done})

	frames, _ := s.Take(nil)
	for _, f := range frames {
		fmt.Println(f.ID, f.Type)
	}
	// Output:
	// 0 stream:ready
	// 2 build:step
	// 0 stream:replayed
	// 3 build:done
}

// A connection writer waits on Ready, takes every queued frame, writes them
// in one go, and stops when Take reports the end of the stream.
func ExampleSubscription_Take() {
	id, _ := bus.ParseSessionID("s")
	started, _ := bus.ParseType("job:started")
	b, err := bus.New(bus.Options{Session: id})
	if err != nil {
		panic(err)
	}
	s, err := b.Subscribe(context.Background(), bus.SubscribeOptions{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	b.Publish(bus.Event{Type: started})
	b.Close() // the session is deleted: the stream ends after what is queued

	var frames []*bus.Frame
	for {
		<-s.Ready()
		var ended bool
		frames, ended = s.Take(frames[:0])
		for _, f := range frames {
			fmt.Println(f.Type) // a real writer writes f.SSE() or f.JSON()
		}
		if ended {
			fmt.Println("end:", s.End())
			return
		}
	}
	// Output:
	// stream:ready
	// job:started
	// stream:closed
	// end: session_deleted
}

// Every event is encoded once, as a complete SSE frame whose data line is
// the JSON envelope that WebSocket sends.
func ExampleFrame_SSE() {
	id, _ := bus.ParseSessionID("b-17")
	step, _ := bus.ParseType("build:step")
	b, err := bus.New(bus.Options{Session: id})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	s, err := b.Subscribe(context.Background(), bus.SubscribeOptions{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	s.Take(nil) // stream:ready
	b.Publish(bus.Event{
		Type:       step,
		Data:       json.RawMessage(`{ "n": 3 }`),
		Originator: "cli-9",
		Time:       time.Date(2026, 8, 22, 10, 0, 0, 123e6, time.UTC),
	})
	frames, _ := s.Take(nil)
	os.Stdout.Write(frames[0].SSE())
	// Output:
	// id: 1
	// event: build:step
	// data: {"id":1,"v":1,"type":"build:step","session":"b-17","data":{"n":3},"timestamp":"2026-08-22T10:00:00.123Z","originator":"cli-9"}
}
