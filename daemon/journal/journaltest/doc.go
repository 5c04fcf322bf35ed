// Package journaltest damages a journal's files the way bad days do, for
// the tests of the journal and of the daemon: it flips, zeroes and cuts
// bytes at chosen or random offsets of every journal file, fills a small
// filesystem, and plants symlinks and FIFOs where files should be.
//
// It knows only the file names of the journal (journal.db and
// wal-NNNNNNNNNNNNNNNN.log), not its format, so that the damage it does is
// blind, like bit rot or a truncated copy.
package journaltest
