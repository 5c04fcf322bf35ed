package bus

import (
	"strconv"
)

// Defaults of the SPEC (§2.1, §2.2, §10).
const (
	DefaultRingSize       = 8000
	DefaultRingMaxBytes   = 64 << 20
	DefaultMaxQueued      = 256
	DefaultMaxQueuedBytes = 2 << 20
	DefaultMaxSubscribers = 64
	MaxRingSize           = 1_000_000
)

// Limits are the settings that may change while a bus runs (on reload).
type Limits struct {
	RingSize       int
	RingMaxBytes   int64
	MaxQueued      int
	MaxQueuedBytes int64
	MaxSubscribers int
	PeerShare      float64
}

func (o *Options) limits() Limits {
	return Limits{o.RingSize, o.RingMaxBytes, o.MaxQueued, o.MaxQueuedBytes, o.MaxSubscribers, o.PeerShare}
}

func (l *Limits) fill() {
	if l.RingSize <= 0 {
		l.RingSize = DefaultRingSize
	}
	if l.RingMaxBytes <= 0 {
		l.RingMaxBytes = DefaultRingMaxBytes
	}
	if l.MaxQueued <= 0 {
		l.MaxQueued = DefaultMaxQueued
	}
	if l.MaxQueuedBytes <= 0 {
		l.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if l.MaxSubscribers <= 0 {
		l.MaxSubscribers = DefaultMaxSubscribers
	}
}

// Validate checks limits as given, before the defaults fill them in: zero
// means the default, a negative value is an *InputError rather than a silent
// default. Limits that pass it are accepted by SetLimits and bus.New.
func (l Limits) Validate() error {
	if l.RingSize > MaxRingSize {
		return inputError("ringSize", strconv.Itoa(l.RingSize), "above 1000000")
	}
	for _, v := range []struct {
		field string
		n     int64
	}{
		{"ringSize", int64(l.RingSize)},
		{"ringMaxBytes", l.RingMaxBytes},
		{"maxQueued", int64(l.MaxQueued)},
		{"maxQueuedBytes", l.MaxQueuedBytes},
		{"maxSubscribers", int64(l.MaxSubscribers)},
	} {
		if v.n < 0 {
			return inputError(v.field, strconv.FormatInt(v.n, 10), "negative (0 means the default)")
		}
	}
	if !(l.PeerShare >= 0 && l.PeerShare <= 1) {
		return inputError("peerShare", strconv.FormatFloat(l.PeerShare, 'g', -1, 64), "want 0 to 1")
	}
	return nil
}

// SetLimits applies new limits: the ring evicts at once if it must; queue
// limits apply to subscribers that join from now on. Zero fields keep the
// defaults. It fails, changing nothing, exactly when l.Validate does.
func (b *Bus) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	l.fill()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limits = l
	b.subPool.SetLimit(int64(l.MaxSubscribers), l.PeerShare)
	b.store.SetLimits(l.RingSize, l.RingMaxBytes)
	b.noteRingBytesLocked()
	return nil
}
