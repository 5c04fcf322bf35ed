package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// summarise runs the summary over input and returns what it printed.
func summarise(t *testing.T, input string) (*summary, string) {
	t.Helper()
	var out bytes.Buffer
	s := newSummary(&out, "example.com/s")
	if err := s.read(strings.NewReader(input)); err != nil {
		t.Fatal(err)
	}
	s.finish()
	return s, out.String()
}

// TestSummaryCountsAndShowsEveryFailureAndSkip reads a real "go test -json"
// run (testdata/sample.json: a package with a passing, a skipped and a
// failing test with subtests, one whose TestMain fails after its tests
// passed, one that does not build, one without tests) and checks the counts
// and that every failure's output and every skip's reason is printed.
func TestSummaryCountsAndShowsEveryFailureAndSkip(t *testing.T) {
	in, err := os.ReadFile("testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	s, out := summarise(t, string(in))
	// passed: a.TestPass, a.TestFail/sub_ok, b.TestPass; failed: a.TestFail,
	// a.TestFail/sub_bad, b's TestMain, c's build; skipped: a.TestSkip.
	if s.passed != 3 || s.failed != 4 || s.skipped != 1 {
		t.Errorf("counts = %d passed, %d failed, %d skipped; want 3, 4, 1\n%s", s.passed, s.failed, s.skipped, out)
	}
	for _, want := range []string{
		"go: downloading example.com/x v1.0.0\n", // not JSON: printed as it is
		"FAIL  a ",
		"skip TestSkip: a_test.go:6: needs nats-server (Debian package nats-server)\n",
		"a_test.go:10: got 1, want 2\n",
		"--- FAIL: TestFail/sub_bad",
		"a_test.go:8: before\n",
		"c/c_test.go:5:32: undefined: undefined\n",
		"leak found\n",
		"--- b failed outside its tests",
		"go test: 3 packages (1 without tests): 3 passed, 4 failed, 1 skipped tests\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, noise := range []string{"=== RUN", "FAIL\texample.com", "[no test files]"} {
		if strings.Contains(out, noise) {
			t.Errorf("output has go test's %q:\n%s", noise, out)
		}
	}
}

// TestSummaryFailsAPackageCutShort checks that a stream that ends before
// a package does (go test killed, or a test binary that hung past its
// timeout) counts the test that was running as failed and shows its output.
func TestSummaryFailsAPackageCutShort(t *testing.T) {
	in := `{"Action":"start","Package":"example.com/s/a"}
{"Action":"run","Package":"example.com/s/a","Test":"TestDone"}
{"Action":"pass","Package":"example.com/s/a","Test":"TestDone"}
{"Action":"run","Package":"example.com/s/a","Test":"TestHang"}
{"Action":"output","Package":"example.com/s/a","Test":"TestHang","Output":"    a_test.go:9: waiting\n"}
`
	s, out := summarise(t, in)
	if s.passed != 1 || s.failed != 1 || s.skipped != 0 {
		t.Errorf("counts = %d passed, %d failed, %d skipped; want 1, 1, 0\n%s", s.passed, s.failed, s.skipped, out)
	}
	for _, want := range []string{"FAIL  a ", "a_test.go:9: waiting\n", "--- TestHang did not finish\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSummaryOfAPassingRunIsShort checks that passing tests print nothing
// but their package's line.
func TestSummaryOfAPassingRunIsShort(t *testing.T) {
	in := `{"Action":"start","Package":"example.com/s/a"}
{"Action":"run","Package":"example.com/s/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/s/a","Test":"TestOK","Output":"    a_test.go:3: chatter\n"}
{"Action":"pass","Package":"example.com/s/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/s/a","Output":"PASS\n"}
{"Action":"pass","Package":"example.com/s/a","Elapsed":1.25}
`
	s, out := summarise(t, in)
	want := "ok    a                                   1.2s  1 passed\n" +
		"go test: 1 packages (0 without tests): 1 passed, 0 failed, 0 skipped tests\n"
	if s.failed != 0 || out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}
