package ipc

import (
	"bytes"
	"encoding/json"
	"iter"
	"net/http"
	"sync"

	"github.com/localbus/localbus/ipc/wire"
)

// The sessions list is the one large answer clients ask for again and
// again: localbus top reads every session each second, about 250 bytes
// each, 2.5 MB at 10,000 sessions. writeJSON would hold the page's
// values, json.Marshal's encoding of them and a copy of it, half a
// megabyte of garbage a page of 1,000 for the collector to find in a heap
// as large as the sessions; here each session is encoded as it is read,
// into a buffer kept between requests.

// listBuffers hold the sessions lists being written.
var listBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeSessionList answers with the page of sessions infos and next: the
// bytes writeJSON writes for wire.SessionList{Sessions: infos, Next: next}.
func writeSessionList(w http.ResponseWriter, infos iter.Seq[wire.SessionInfo], next string) {
	b := listBuffers.Get().(*bytes.Buffer)
	defer listBuffers.Put(b)
	b.Reset()
	if err := appendSessionList(b, infos, next); err != nil {
		writeError(w, errorf(http.StatusInternalServerError, wire.CodeInternal, "response encoding failed"))
		return
	}
	setJSONHeaders(w)
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}

// appendSessionList writes the list to b as json.Marshal encodes it, and a
// newline.
func appendSessionList(b *bytes.Buffer, infos iter.Seq[wire.SessionInfo], next string) error {
	enc := json.NewEncoder(b)
	// Encode ends each value with a newline, which goes.
	encode := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1)
		return nil
	}
	b.WriteString(`{"sessions":[`)
	var info wire.SessionInfo // one value, reused: Encode's argument escapes
	first := true
	for info = range infos {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if err := encode(&info); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	if next != "" {
		b.WriteString(`,"next":`)
		if err := encode(next); err != nil {
			return err
		}
	}
	b.WriteString("}\n")
	return nil
}
