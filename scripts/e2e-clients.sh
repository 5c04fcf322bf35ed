#!/usr/bin/env bash
# e2e-clients.sh drives the built daemon over its Unix socket with clients
# localbus did not write: curl for REST and SSE, Python's websockets for
# WebSocket. It starts and stops its own daemon in a temporary directory.
#
# It prints one line per check: "ok - …", "not ok - …" (then it stops), or
# "skip - …" naming the Debian package a check needs when it is missing;
# scripts/test counts them.
set -eu
cd "$(dirname "$0")/.."

PY=/usr/bin/python3
tmp=$(mktemp -d)
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  jobs -p | xargs -r kill 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "not ok - $*"
  [ -f "$tmp/daemon.log" ] && sed 's/^/  daemon: /' "$tmp/daemon.log" >&2
  exit 1
}
pass=0 skipped=0
ok() { pass=$((pass + 1)); echo "ok - $*"; }
skip() { skipped=$((skipped + 1)); echo "skip - $*"; }

if ! command -v curl >/dev/null 2>&1; then
  skip "every check: curl is not installed (Debian package curl)"
  exit 0
fi
websockets=1
"$PY" -c 'import websockets' >/dev/null 2>&1 || websockets=0

# wait_for CMD... : retry a command for up to 10 s.
wait_for() {
  for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

go build -o "$tmp/localbus" ./cmd/localbus
sock="$tmp/run/lb.sock"
"$tmp/localbus" serve --socket "$sock" --durability memory --keepalive 1s 2>"$tmp/daemon.log" &
daemon_pid=$!
wait_for test -S "$sock" || fail "daemon did not create its socket"

api() { curl -sS --unix-socket "$sock" "$@"; }
status_of() { curl -s -o "$tmp/body" -w '%{http_code}' --unix-socket "$sock" "$@"; }

# Socket file mode and directory mode.
[ "$(stat -c %a "$sock")" = 660 ] || fail "socket mode $(stat -c %a "$sock"), want 660"
[ "$(stat -c %a "$tmp/run")" = 750 ] || fail "socket dir mode $(stat -c %a "$tmp/run"), want 750"
ok "socket is 0660 in a 0750 directory"

# REST: health and caps.
[ "$(status_of http://x/healthz)" = 200 ] || fail "healthz"
api http://x/api/v1/caps | grep -q '"schemaVersion":1' || fail "caps"
ok "healthz and caps answer"

# SSE follower started before the session exists has nothing to follow: 404.
[ "$(status_of http://x/api/v1/sessions/demo/events)" = 404 ] || fail "stream of unknown session should be 404"
grep -q '"code":"not_found"' "$tmp/body" || fail "404 body: $(cat "$tmp/body")"
ok "unknown session stream is a JSON 404"

# Create the session, follow it with curl's SSE, publish three events.
[ "$(status_of -X POST -d '{"id":"demo"}' http://x/api/v1/sessions)" = 201 ] || fail "create session: $(cat "$tmp/body")"
[ "$(status_of -X POST -d '{"id":"demo"}' http://x/api/v1/sessions)" = 409 ] || fail "create twice should be 409"
curl -sN --unix-socket "$sock" http://x/api/v1/sessions/demo/events >"$tmp/sse.out" &
sse_pid=$!
wait_for grep -q 'event: stream:ready' "$tmp/sse.out" || fail "SSE stream:ready"
api -H 'Localbus-Client-Id: e2e' -d '{"type":"build:step","data":{"n":1}}' http://x/api/v1/sessions/demo/events | grep -q '"ids":\[1\]' || fail "publish 1"
printf '%s\n' '{"type":"build:step","data":{"n":2}}' '{"type":"build:done","data":{"n":3}}' |
  api -H 'Content-Type: application/x-ndjson' --data-binary @- http://x/api/v1/sessions/demo/events | grep -q '"lastId":3' || fail "ndjson publish"
wait_for test "$(grep -c '^id: ' "$tmp/sse.out")" -ge 3 || fail "SSE did not get 3 events: $(cat "$tmp/sse.out")"
[ "$(grep '^id: ' "$tmp/sse.out" | tr -d '\n')" = "id: 1id: 2id: 3" ] || fail "SSE ids out of order"
head -1 "$tmp/sse.out" | grep -qx 'retry: 3000' || fail "SSE must start with retry: 3000"
grep -q '"originator":"e2e"' "$tmp/sse.out" || fail "originator missing"
ok "curl follows SSE: ids 1..3 in order, retry first, originator kept"

# Keepalive comment on a quiet stream (keepalive 1s).
wait_for grep -q '^: ping' "$tmp/sse.out" || fail "no keepalive comment"
kill "$sse_pid"; wait "$sse_pid" 2>/dev/null || true
ok "quiet SSE stream gets ': ping'"

# Resume with Last-Event-ID: exactly the missed events, then stream:replayed.
curl -sN --max-time 1 --unix-socket "$sock" -H 'Last-Event-ID: 1' http://x/api/v1/sessions/demo/events >"$tmp/resume.out" || true
[ "$(grep '^id: ' "$tmp/resume.out" | tr -d '\n')" = "id: 2id: 3" ] || fail "resume got: $(cat "$tmp/resume.out")"
grep -q '"replayedCount":2' "$tmp/resume.out" || fail "stream:replayed count"
ok "Last-Event-ID resume replays exactly the missed events"

# Refusals: clear JSON errors, nothing stored.
[ "$(status_of 'http://x/api/v1/sessions/demo/events?since=abc')" = 400 ] || fail "bad since"
grep -q '"code":"invalid_since"' "$tmp/body" || fail "bad since body: $(cat "$tmp/body")"
[ "$(status_of -d '{"type":"stream:ready"}' http://x/api/v1/sessions/demo/events)" = 400 ] || fail "reserved type"
[ "$(status_of -d '[{"type":"a:b"},{"type":"bad"}]' http://x/api/v1/sessions/demo/events)" = 400 ] || fail "bad batch"
api http://x/api/v1/sessions/demo | grep -q '"lastId":3' || fail "refused batch stored something"
ok "bad input is a JSON 400 and stores nothing"

# WebSocket with Python's websockets: replay, control ops, filtered live, deletion closes 1000.
if [ "$websockets" = 1 ]; then
  "$PY" scripts/e2e/ws_client.py filter-and-close "$sock" demo >"$tmp/ws.out" || fail "websocket client: $(cat "$tmp/ws.out")"
  grep -q '"replayed": \[1, 2, 3\]' "$tmp/ws.out" || fail "ws replay: $(cat "$tmp/ws.out")"
  ok "python websockets: replay, set filter, error replies, close 1000 on delete"
else
  skip "python websockets client: $PY cannot import websockets (Debian package python3-websockets)"
fi

# Shutdown: a connected WebSocket client sees stream:closed and 1001; daemon exits 0; socket removed.
ws_pid=""
if [ "$websockets" = 1 ]; then
  api -d '{"type":"job:start"}' http://x/api/v1/sessions/late/events >/dev/null
  "$PY" scripts/e2e/ws_client.py wait-shutdown "$sock" late "$tmp/ws-ready" >"$tmp/ws2.out" &
  ws_pid=$!
  wait_for test -e "$tmp/ws-ready" || fail "ws client did not connect"
fi
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "daemon exit code $?"
daemon_pid=""
if [ -n "$ws_pid" ]; then
  wait "$ws_pid" || fail "ws client on shutdown: $(cat "$tmp/ws2.out")"
fi
[ -e "$sock" ] && fail "socket not removed on clean exit"
if [ "$websockets" = 1 ]; then
  ok "SIGTERM: WebSocket gets stream:closed + 1001, daemon exits 0, socket unlinked"
else
  ok "SIGTERM: daemon exits 0, socket unlinked"
  skip "python websockets client on shutdown: $PY cannot import websockets (Debian package python3-websockets)"
fi

echo "# e2e-clients: $pass ok, $skipped skipped"
