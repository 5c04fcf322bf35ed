package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	module := flag.String("module", "", "module path to trim from package names")
	counts := flag.String("counts", "", "file to write \"PASSED FAILED SKIPPED\" to")
	flag.Parse()

	s := newSummary(os.Stdout, *module)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	s.finish()
	if *counts != "" {
		line := fmt.Sprintf("%d %d %d\n", s.passed, s.failed, s.skipped)
		if err := os.WriteFile(*counts, []byte(line), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
	}
	if s.failed > 0 {
		os.Exit(1)
	}
}

// event is one line of "go test -json" (cmd/test2json).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output and build-fail
	FailedBuild string // a package's fail when its build failed
}

// test is what one test (or subtest) printed and how it ended.
type test struct {
	name   string
	output []string
	result string // "pass", "fail", "skip", or "" while it runs
}

// pkg gathers one package's events until it ends.
type pkg struct {
	tests  map[string]*test
	order  []*test  // by first event
	failed []*test  // by the time they failed
	output []string // printed outside any test
}

// summary prints each package as it ends and counts every test.
type summary struct {
	w      io.Writer
	module string

	pkgs  map[string]*pkg
	build map[string][]string // build output by import path

	passed, failed, skipped int
	packages, noTests       int
}

func newSummary(w io.Writer, module string) *summary {
	return &summary{w: w, module: module, pkgs: map[string]*pkg{}, build: map[string][]string{}}
}

// read consumes a stream of events until EOF.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintln(s.w, string(line))
			continue
		}
		s.add(e)
	}
	return sc.Err()
}

func (s *summary) add(e event) {
	switch e.Action {
	case "build-output":
		s.build[e.ImportPath] = append(s.build[e.ImportPath], e.Output)
		return
	case "build-fail":
		return
	}
	p := s.pkgs[e.Package]
	if p == nil {
		p = &pkg{tests: map[string]*test{}}
		s.pkgs[e.Package] = p
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.output = append(p.output, e.Output)
		case "pass", "fail", "skip":
			s.end(e, p)
			delete(s.pkgs, e.Package)
		}
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &test{name: e.Test}
		p.tests[e.Test] = t
		p.order = append(p.order, t)
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
	case "pass", "fail", "skip":
		t.result = e.Action
		if e.Action == "fail" {
			p.failed = append(p.failed, t)
		}
	}
}

// end prints a package that has ended with e and adds up its tests.
func (s *summary) end(e event, p *pkg) {
	name := strings.TrimPrefix(strings.TrimPrefix(e.Package, s.module), "/")
	if name == "" {
		name = "."
	}
	if e.Action == "skip" && len(p.order) == 0 {
		s.noTests++ // [no test files]
		return
	}
	s.packages++
	var passed, failed, skipped int
	var skips, unfinished []*test
	for _, t := range p.order {
		switch t.result {
		case "pass":
			passed++
		case "skip":
			skipped++
			skips = append(skips, t)
		case "fail":
			failed++
		default: // still running when the package ended: a panic or a timeout
			failed++
			unfinished = append(unfinished, t)
		}
	}
	outside := e.Action == "fail" && failed == 0
	if outside {
		failed++
	}
	s.passed += passed
	s.failed += failed
	s.skipped += skipped

	status := "ok  "
	if e.Action == "fail" {
		status = "FAIL"
	}
	line := fmt.Sprintf("%s  %-32s %6.1fs  %d passed", status, name, e.Elapsed, passed)
	if failed > 0 {
		line += fmt.Sprintf(", %d failed", failed)
	}
	if skipped > 0 {
		line += fmt.Sprintf(", %d skipped", skipped)
	}
	fmt.Fprintln(s.w, line)
	for _, t := range skips {
		fmt.Fprintf(s.w, "      skip %s: %s\n", t.name, skipReason(t.output))
	}
	for _, t := range p.failed {
		printOutput(s.w, t.output)
	}
	for _, t := range unfinished {
		printOutput(s.w, t.output)
		fmt.Fprintf(s.w, "--- %s did not finish\n", t.name)
	}
	if e.Action == "fail" {
		if e.FailedBuild != "" {
			printOutput(s.w, s.build[e.FailedBuild])
		}
		printOutput(s.w, p.output)
		if outside {
			fmt.Fprintf(s.w, "--- %s failed outside its tests (counted as one failed test)\n", name)
		}
	}
}

// finish prints the line with the counts of everything read.
func (s *summary) finish() {
	for name, p := range s.pkgs { // no end event: go test was cut short
		s.end(event{Action: "fail", Package: name}, p)
	}
	fmt.Fprintf(s.w, "go test: %d packages (%d without tests): %d passed, %d failed, %d skipped tests\n",
		s.packages, s.noTests, s.passed, s.failed, s.skipped)
}

// printOutput prints lines of test output without go test's progress
// markers.
func printOutput(w io.Writer, lines []string) {
	for _, l := range lines {
		if isMarker(l) {
			continue
		}
		fmt.Fprint(w, l)
		if !strings.HasSuffix(l, "\n") {
			fmt.Fprintln(w)
		}
	}
}

func isMarker(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	switch strings.TrimSpace(l) {
	case "PASS", "FAIL":
		return true
	}
	// go test's own line for the package, which the summary replaces
	return strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t")
}

// skipReason joins what a skipped test printed, less the markers and its
// "--- SKIP" line, on one line.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || isMarker(l) || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		parts = append(parts, l)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}
