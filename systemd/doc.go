// Package systemd talks to the service manager: socket activation, sd_notify
// and the watchdog, and it carries the unit files. It is the only package
// that imports github.com/coreos/go-systemd/v22.
package systemd
