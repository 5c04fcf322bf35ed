package upstream

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestCheckAckTakesOnlyTheDueAcknowledgement(t *testing.T) {
	const inbox = "_INBOX.abc."
	for _, c := range []struct {
		name string
		msg  *nats.Msg
		n    uint64
		err  string // "" for none
	}{
		{"stored", &nats.Msg{Subject: inbox + "7", Data: []byte(`{"stream":"LOCALBUS","seq":41}`)}, 7, ""},
		{"a duplicate was stored before", &nats.Msg{Subject: inbox + "7", Data: []byte(`{"stream":"LOCALBUS","seq":40,"duplicate":true}`)}, 7, ""},
		{"another publish's", &nats.Msg{Subject: inbox + "8", Data: []byte(`{"stream":"LOCALBUS","seq":42}`)}, 7, "where 7 was due"},
		{"refused", &nats.Msg{Subject: inbox + "7", Data: []byte(`{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`)}, 7, "publish refused"},
		{"no stream", &nats.Msg{Subject: inbox + "7", Header: nats.Header{"Status": []string{"503"}}}, 7, "status 503"},
	} {
		err := checkAck(c.msg, c.n)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: checkAck = %v, want %q", c.name, err, c.err)
		}
	}
}
