package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

func TestSessionShowAndStatusNameTheProcessesThatListen(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 2)
	startBin(t, "events", "--socket", d.Socket, "--session", "s", "--types", "t:n")
	waitSubscribers(t, c, "s", 1)

	r := runBin(t, "", "session", "show", "s", "--socket", d.Socket)
	if r.code != 0 {
		t.Fatalf("session show: exit %d, stderr %q", r.code, r.stderr)
	}
	// The stream's row: its id, transport, the follower's process name and
	// pid, and the filter, under aligned headers.
	row := regexp.MustCompile(`(?m)^st-\d+ +sse +localbus +\d+ +\d+ +\d+s +\d+ +\d+ +0 +no +- +t:n$`)
	if !strings.Contains(r.stdout, "STREAM  TRANSPORT  PROCESS") || !row.MatchString(r.stdout) || !strings.Contains(r.stdout, "consumers") {
		t.Errorf("session show: stdout %q lacks the stream's row", r.stdout)
	}
	lines := strings.Split(r.stdout, "\n")
	var head, line string
	for i, l := range lines {
		if strings.HasPrefix(l, "STREAM") && i+1 < len(lines) {
			head, line = l, lines[i+1]
		}
	}
	if strings.Index(head, "PROCESS") != strings.Index(line, "localbus") {
		t.Errorf("columns not aligned:\n%s\n%s", head, line)
	}

	r = runBin(t, "", "status", "--socket", d.Socket)
	for _, want := range []string{"\nup ", "1 session, 1 stream, 0 consumers; events/s", "memory: ", "BUS  STREAM", "IN/S"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status: stdout %q lacks %q", r.stdout, want)
		}
	}
	if !regexp.MustCompile(`(?m)^s +st-\d+ +sse +localbus `).MatchString(r.stdout) {
		t.Errorf("status: stdout %q lacks the stream of session s with its process", r.stdout)
	}
}

// TestStatusForACallerThatIsNotAdmin lists the streams session by
// session (GET /api/v1/subscribers is admin's), with the processes of the
// caller's own streams alone.
func TestStatusForACallerThatIsNotAdmin(t *testing.T) {
	t.Parallel()
	d, url, _, read := startTCP(t)
	c := apiClient(t, d)
	publishData(t, c, "mine", "t:n", 1, 1)
	publishData(t, c, "theirs", "t:n", 1, 1)
	publishData(t, c, "nobody", "t:n", 1, 1)
	startBin(t, "events", "--url", url, "--key", read, "--session", "mine")
	startBin(t, "events", "--socket", d.Socket, "--session", "theirs")
	waitSubscribers(t, c, "mine", 1)
	waitSubscribers(t, c, "theirs", 1)

	r := runBin(t, "", "status", "--url", url, "--key", read)
	if r.code != 0 {
		t.Fatalf("status as a reader: exit %d, stderr %q", r.code, r.stderr)
	}
	// The reader's own stream names its key and address; root's stream is
	// listed with its session and transport, its process hidden.
	own := regexp.MustCompile(`(?m)^mine +st-\d+ +sse +tcp 127\.0\.0\.1:\d+ \(reader\) +- +- +\d+s +\d+ +\d+ +0 +no +- +\*$`)
	other := regexp.MustCompile(`(?m)^theirs +st-\d+ +sse +- +- +- +\d+s +\d+ +\d+ +0 +no +- +\*$`)
	if !strings.Contains(r.stdout, "BUS     STREAM  TRANSPORT  PROCESS") || !own.MatchString(r.stdout) || !other.MatchString(r.stdout) {
		t.Errorf("status as a reader: stdout lacks the streams of mine and theirs:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "\nnobody  st-") || strings.Contains(r.stdout, "memory: ") {
		t.Errorf("status as a reader: a stream of nobody, or admin's figures:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "3 sessions, 2 streams, 0 consumers") {
		t.Errorf("status as a reader: stdout lacks the counts:\n%s", r.stdout)
	}
}

// TestSessionShowListsTheConsumers lists a session's consumers, one
// reading now and one gone, beside its streams, in aligned columns.
func TestSessionShowListsTheConsumers(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 5)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	// backup acknowledges up to 3 and keeps reading; later reads all 5
	// and goes, its position stored as it ends.
	backup, err := c.Stream(ctx, client.StreamOptions{Session: "s", Consumer: "backup", Ack: client.AckExplicit})
	if err != nil {
		t.Fatal(err)
	}
	defer backup.Close()
	readEvents(t, ctx, backup, 3)
	if err := backup.Ack(ctx, 3); err != nil {
		t.Fatal(err)
	}
	later, err := c.Stream(ctx, client.StreamOptions{Session: "s", Consumer: "later"})
	if err != nil {
		t.Fatal(err)
	}
	readEvents(t, ctx, later, 5)
	later.Close()
	bustest.Eventually(t, e2eWait, "later's position stored as it ended", func() bool {
		cs, err := c.Consumers(ctx, "s")
		return err == nil && len(cs) == 2 && cs[1].Name == "later" && !cs[1].Connected && cs[1].AckedID == 5
	})

	r := runBin(t, "", "session", "show", "s", "--socket", d.Socket)
	if r.code != 0 {
		t.Fatalf("session show: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, row := range []string{
		`(?m)^consumers +2$`,
		`(?m)^CONSUMER  ACK       ACKED ID  PENDING  CONNECTED  ACTIVE$`,
		`(?m)^backup    explicit  3         2        yes        \d+s ago$`,
		`(?m)^later     auto      5         0        no         \d+s ago$`,
		// backup's stream names it, with the test's process.
		`(?m)^st-\d+ +sse +\S+ +\d+ +\d+ +\d+s +\d+ +\d+ +\d+ +no +backup +\*$`,
	} {
		if !regexp.MustCompile(row).MatchString(r.stdout) {
			t.Errorf("session show: stdout lacks %s:\n%s", row, r.stdout)
		}
	}
	r = runBin(t, "", "session", "show", "s", "--json", "--socket", d.Socket)
	var shown struct {
		Consumers    int               `json:"consumers"`
		ConsumerList []client.Consumer `json:"consumerList"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.Consumers != 2 || len(shown.ConsumerList) != 2 ||
		shown.ConsumerList[0].Name != "backup" || shown.ConsumerList[0].Ack != string(client.AckExplicit) || shown.ConsumerList[0].AckedID != 3 {
		t.Errorf("session show --json: %v, %+v:\n%s", err, shown, r.stdout)
	}
}

// readEvents reads n events (not reserved frames) from s.
func readEvents(t *testing.T, ctx context.Context, s *client.Stream, n int) {
	t.Helper()
	for n > 0 {
		f, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if !f.Reserved() {
			n--
		}
	}
}
