// Localbus is a local event bus: the daemon (localbus serve) and its
// command-line client in one binary. Run "localbus --help" for the commands.
package main
