// Package natstest runs a real nats-server with JetStream for tests: on a
// loopback port, its store in a temporary directory, stopped when the test
// ends. Tests skip when the binary is missing (Debian's package
// nats-server installs it).
package natstest
