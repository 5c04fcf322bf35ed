// Package bustest helps tests read a [bus.Subscription] the way a connection
// writer does, and look at what it got as decoded envelopes.
//
// A writer loops on Ready and Take; [Collect] and [CollectEnd] do that with a
// bounded wait and fail the test when the time runs out, [Drain] takes only
// what is queued now. They decode every frame into a [bus.Envelope];
// [Data] decodes an envelope's data into one of the bus's frame types, such
// as [bus.ReadyData] or [bus.LaggedData].
//
// [Type], [SessionID] and [Family] parse the values a test spells out.
//
// Taking from a subscription is not free of side effects: a Take that finds
// nothing marks the writer as waiting, so the next live frame is handed over
// without counting toward the queue limits (see package bus, Backpressure).
// Tests that pin queue accounting should keep that in mind.
//
//	s, _ := b.Subscribe(ctx, bus.SubscribeOptions{Cursor: &zero})
//	envs, ended := bustest.Collect(t, s, 3, 5*time.Second)
//	ready := bustest.Data[bus.ReadyData](t, envs[0])
package bustest
