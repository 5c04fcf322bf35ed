// Testsum reads the output of "go test -json" and prints it for people: one
// line per package, the reason of every skipped test, and the whole output of
// every failed test and failed package (a build error, a panic, a leak found
// after the tests). It ends with the counts of passed, failed and skipped
// tests, and exits 1 when anything failed.
//
// scripts/test runs it as
//
//	go test -json ./... 2>&1 | testsum -module github.com/localbus/localbus -counts FILE
//
// A line that is not a JSON event (go's own messages on stderr) is printed as
// it is. Subtests count like tests. A package that fails although none of its
// tests did counts as one failed test, so a failure outside any test is never
// lost; so does a go test that exits non-zero with no failure in its output,
// which scripts/test adds itself.
//
// -counts FILE writes "PASSED FAILED SKIPPED" to FILE for scripts/test to add
// to the counts of the end-to-end scripts.
package main
