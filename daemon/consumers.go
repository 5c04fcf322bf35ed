package daemon

import (
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
)

// hubJournal is the journal as the hub sees it: the journal itself, and
// its consumers (hub.ConsumerJournal) in the hub's types, which the
// journal does not import.
type hubJournal struct{ *journal.Journal }

// SessionConsumers returns session's stored consumers and a store for
// them.
func (j hubJournal) SessionConsumers(session string) ([]hub.ConsumerState, hub.ConsumerStore, error) {
	cs, err := j.Consumers(session)
	if err != nil {
		return nil, nil, err
	}
	out := make([]hub.ConsumerState, len(cs))
	for i, c := range cs {
		out[i] = hub.ConsumerState{Name: c.Name, Ack: hub.AckMode(c.Ack), AckedID: c.AckedID, Epoch: c.Epoch,
			Created: c.Created, LastActive: c.LastActive}
	}
	return out, sessionConsumers{j.Journal, session}, nil
}

// sessionConsumers stores one session's consumers in the journal.
type sessionConsumers struct {
	j       *journal.Journal
	session string
}

func (s sessionConsumers) PutConsumer(c hub.ConsumerState) error {
	return s.j.PutConsumer(s.session, journal.Consumer{Name: c.Name, Ack: journal.AckMode(c.Ack), AckedID: c.AckedID,
		Epoch: c.Epoch, Created: c.Created, LastActive: c.LastActive})
}

func (s sessionConsumers) DeleteConsumer(name string) error {
	return s.j.DeleteConsumer(s.session, name)
}
