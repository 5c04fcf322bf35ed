package upstream

import "testing"

func TestRedactURLHidesUserNamesAndPasswords(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://alice:s3cret@h:4222", "nats://redacted@h:4222"},
		{"nats://alice@h:4222", "nats://redacted@h:4222"},
		{"nats://token@h", "nats://redacted@h"},
		{"tls://h:4222", "tls://h:4222"},
		{"nats://alice:s3cret@h:4222/%zz", "nats://redacted@h:4222/%zz"},
		{"alice:s3cret@h", "redacted@h"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
