"""A WebSocket client for the end-to-end script, built on Debian's python3-websockets.

It is a client localbus did not write: it speaks RFC 6455 over the daemon's Unix
socket with websockets.unix_connect. Each subcommand prints what it saw as JSON
lines on stdout and exits non-zero on anything unexpected.
"""
import asyncio
import json
import subprocess
import sys

import websockets


def publish(sock, session, events):
    body = json.dumps(events)
    out = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "--unix-socket", sock,
         "-H", "Content-Type: application/json", "--data-binary", body,
         f"http://localbus/api/v1/sessions/{session}/events"],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


async def recv_json(ws, timeout=10):
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def filter_and_close(sock, session):
    """Replay, a set control op, filtered live events, then session deletion (1000)."""
    uri = f"ws://localbus/api/v1/sessions/{session}/ws?since=0"
    async with websockets.unix_connect(sock, uri) as ws:
        frames = []
        while True:
            f = await recv_json(ws)
            frames.append(f)
            if f["type"] == "stream:replayed":
                break
        assert frames[0]["type"] == "stream:ready", frames[0]
        ids = [f["id"] for f in frames if "id" in f]
        assert ids == sorted(ids) and len(ids) == len(set(ids)), ids
        print(json.dumps({"replayed": ids}))

        await ws.send(json.dumps({"op": "set", "types": ["build:done"]}))
        reply = await recv_json(ws)
        assert reply == {"op": "subscribed", "types": ["build:done"]}, reply

        await ws.send(json.dumps({"op": "bogus"}))
        reply = await recv_json(ws)
        assert reply["op"] == "error", reply

        await ws.send(b"\x00\x01")
        reply = await recv_json(ws)
        assert reply["op"] == "error", reply

        publish(sock, session, [{"type": "build:step", "data": 1}, {"type": "build:done", "data": 2}])
        f = await recv_json(ws)
        assert f["type"] == "build:done" and f["data"] == 2, f
        print(json.dumps({"filtered": f["id"]}))

        subprocess.run(["curl", "-sS", "--fail", "-X", "DELETE", "--unix-socket", sock,
                        f"http://localbus/api/v1/sessions/{session}"], check=True)
        f = await recv_json(ws)
        assert f["type"] == "stream:closed" and f["data"]["reason"] == "session_deleted", f
        try:
            await asyncio.wait_for(ws.recv(), 10)
            raise AssertionError("expected the server to close")
        except websockets.ConnectionClosed as e:
            assert e.code == 1000, e.code
        print(json.dumps({"closed": 1000}))


async def wait_shutdown(sock, session, ready_file):
    """Follow a session until the daemon shuts down: stream:closed, then 1001."""
    uri = f"ws://localbus/api/v1/sessions/{session}/ws"
    async with websockets.unix_connect(sock, uri) as ws:
        f = await recv_json(ws)
        assert f["type"] == "stream:ready", f
        open(ready_file, "w").close()
        f = await recv_json(ws, timeout=30)
        assert f["type"] == "stream:closed" and f["data"]["reason"] == "shutdown", f
        assert f["data"]["retryMs"] > 0, f
        try:
            await asyncio.wait_for(ws.recv(), 10)
            raise AssertionError("expected the server to close")
        except websockets.ConnectionClosed as e:
            assert e.code == 1001, e.code
        print(json.dumps({"closed": 1001}))


def main():
    cmd, sock, session = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd == "filter-and-close":
        asyncio.run(filter_and_close(sock, session))
    elif cmd == "wait-shutdown":
        asyncio.run(wait_shutdown(sock, session, sys.argv[4]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
