// Package daemon owns the process lifetime of localbus serve: configuration
// and keys loading, listeners, the session registry, reload, shutdown and
// signals.
package daemon
