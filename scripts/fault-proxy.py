#!/usr/bin/env python3
"""A reverse proxy for an S3 server (moto) that injects faults on demand, for dsv's tests.

Usage: scripts/fault-proxy.py UPSTREAM [--port N] [--host H] [--verbose]
  UPSTREAM   the server's base URL, e.g. http://127.0.0.1:5391
  --port     the port to listen on; 0 (the default) picks a free one
  Prints the port it listens on as the first line of stdout, then serves until killed.

Every request is forwarded unchanged (method, path and query, headers, body) to UPSTREAM,
Host header included: a client signs its requests (SigV4) for the proxy's host, and moto
neither checks signatures nor needs its own host name for path-style requests. The answer
comes back with its status and headers as the upstream sent them (the body re-sent with a
Content-Length), unless a fault rule matches.

Control endpoint (never forwarded):
  POST /__faults__    body {"rules": [RULE, ...]} (or one RULE): replaces the rules
  DELETE /__faults__  removes every rule
  GET /__faults__     counters: {"requests", "forwarded", "injected": {KIND: n},
                      "rules": [RULE with "injected" and "passed"]}
Counters other than a rule's own are never reset: compare before and after.

A RULE is a JSON object:
  fault    "status"   answer STATUS (default 503, SlowDown XML) without asking upstream
           "reset"    send the headers and AFTER bytes of the body, then reset (RST)
           "truncate" send the headers and AFTER bytes of the body, then close (FIN);
                      the declared Content-Length is kept, so the body is cut short
           "short"    a complete answer of AFTER bytes: Content-Length says AFTER, the
                      rest of the headers (Content-Range) stay as they were
           "stall"    send the headers and AFTER bytes (default 0), wait SECONDS, close;
                      the rule's "abandoned" counts the stalls the client hung up on first
           "corrupt"  flip SPAN bytes (default 1) at offset AT (default: the middle)
  path     a regular expression searched in the request's path and query ("" matches all)
  method   the request method (default "GET"; "*" for any)
  ranged   true: only requests with a Range header (default false)
  skip     let this many matching requests pass first (default 0)
  times    inject this many times, then let matching requests pass (default: always)
  status, after, seconds, at, span: as above; AFTER defaults to half the body
A request is checked against the rules in order; the first that matches and still has
faults to inject is applied. A rule's "passed" counts the matching requests it let pass.
"""

import argparse
import http.client
import json
import re
import select
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTROL = "/__faults__"
KINDS = ("status", "reset", "truncate", "short", "stall", "corrupt")
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
}


class State:
    """The rules and counters, shared by every handler thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.requests = 0
        self.forwarded = 0
        self.injected = {kind: 0 for kind in KINDS}

    def set_rules(self, rules):
        checked = []
        for rule in rules:
            if rule.get("fault") not in KINDS:
                raise ValueError(f"fault must be one of {KINDS}: {rule!r}")
            rule = dict(rule)
            rule["_path"] = re.compile(rule.get("path", ""))
            rule["injected"] = 0
            rule["passed"] = 0
            rule["abandoned"] = 0
            rule["_seen"] = 0
            checked.append(rule)
        with self.lock:
            self.rules = checked

    def pick(self, method, path, ranged):
        """The rule to apply to this request, or None; counts either way."""
        with self.lock:
            self.requests += 1
            chosen = None
            for rule in self.rules:
                if rule.get("method", "GET") not in ("*", method):
                    continue
                if rule.get("ranged") and not ranged:
                    continue
                if not rule["_path"].search(path):
                    continue
                rule["_seen"] += 1
                times = rule.get("times")
                if chosen is None and rule["_seen"] > rule.get("skip", 0) and (
                    times is None or rule["injected"] < times
                ):
                    rule["injected"] += 1
                    self.injected[rule["fault"]] += 1
                    chosen = rule
                elif chosen is None:
                    rule["passed"] += 1
            return chosen

    def snapshot(self):
        with self.lock:
            return {
                "requests": self.requests,
                "forwarded": self.forwarded,
                "injected": dict(self.injected),
                "rules": [
                    {k: v for k, v in rule.items() if not k.startswith("_")}
                    for rule in self.rules
                ],
            }


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that drops its connection (as dsv does after a timeout) is no error.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fault-proxy"

    def log_message(self, format, *args):
        if self.server.verbose:
            sys.stderr.write("fault-proxy: " + (format % args) + "\n")

    # Every method goes through one path.
    def do_GET(self):
        self.serve()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(body)
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def answer(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def serve(self):
        state = self.server.state
        body = self.read_body()
        if urllib.parse.urlsplit(self.path).path == CONTROL:
            return self.control(body)
        rule = state.pick(self.command, self.path, "Range" in self.headers)
        if rule is not None and rule["fault"] == "status":
            status = int(rule.get("status", 503))
            code = "SlowDown" if status == 503 else "InternalError"
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>injected by fault-proxy</Message>"
                "<RequestId>fault-proxy</RequestId></Error>"
            ).encode()
            return self.answer(status, xml, "application/xml")
        try:
            status, reason, headers, payload = self.forward(body)
        except OSError as e:
            return self.answer(502, f"upstream: {e}".encode(), "text/plain")
        with state.lock:
            state.forwarded += 1
        if rule is None or self.command == "HEAD" or not payload:
            return self.send(status, reason, headers, payload)
        fault = rule["fault"]
        after = int(rule.get("after", len(payload) // 2))
        after = max(0, min(after, len(payload)))
        if fault == "corrupt":
            at = int(rule.get("at", len(payload) // 2))
            span = int(rule.get("span", 1))
            damaged = bytearray(payload)
            for i in range(max(0, at), min(len(damaged), at + span)):
                damaged[i] ^= 0xFF
            return self.send(status, reason, headers, bytes(damaged))
        if fault == "short":
            return self.send(status, reason, headers, payload[:after])
        # reset, truncate, stall: the declared length is the whole body's.
        self.close_connection = True
        if fault == "stall":
            after = int(rule.get("after", 0))
        try:
            self.send_head(status, reason, headers, len(payload))
            self.wfile.write(payload[:after])
            self.wfile.flush()
            if fault == "stall":
                deadline = time.monotonic() + float(rule.get("seconds", 30))
                while time.monotonic() < deadline:
                    # The client sends nothing while it waits for the body: readable means
                    # it closed the connection (gave up on the answer).
                    readable, _, _ = select.select([self.connection], [], [], 0.05)
                    if readable:
                        try:
                            gone = not self.connection.recv(1, socket.MSG_PEEK)
                        except OSError:
                            gone = True  # reset
                        if gone:
                            with state.lock:
                                rule["abandoned"] += 1
                            break
            elif fault == "reset":
                # Let what was sent arrive before the reset discards the send buffer.
                time.sleep(0.05)
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
        except OSError:
            pass  # the client gave up first

    def forward(self, body):
        upstream = self.server.upstream
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        try:
            conn.putrequest(
                self.command, self.path, skip_host=True, skip_accept_encoding=True
            )
            for key, value in self.headers.items():
                if key.lower() in HOP_BY_HOP or key.lower() == "content-length":
                    continue
                conn.putheader(key, value)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            response = conn.getresponse()
            payload = response.read()
            headers = [
                (k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP
            ]
            return response.status, response.reason, headers, payload
        finally:
            conn.close()

    def send_head(self, status, reason, headers, length):
        self.send_response_only(status, reason)
        for key, value in headers:
            if key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def send(self, status, reason, headers, payload):
        if self.command == "HEAD" or status in (204, 304):
            # Not a body: the upstream's Content-Length (the object's size) stays.
            self.send_response_only(status, reason)
            for key, value in headers:
                self.send_header(key, value)
            self.end_headers()
            return
        self.send_head(status, reason, headers, len(payload))
        self.wfile.write(payload)

    def control(self, body):
        state = self.server.state
        if self.command == "GET":
            return self.answer(200, json.dumps(state.snapshot()).encode())
        if self.command == "DELETE":
            state.set_rules([])
            return self.answer(200, b"{}")
        if self.command == "POST":
            try:
                spec = json.loads(body or b"{}")
                rules = spec.get("rules", [spec] if "fault" in spec else [])
                state.set_rules(rules)
            except (ValueError, AttributeError, re.error) as e:
                return self.answer(400, json.dumps({"error": str(e)}).encode())
            return self.answer(200, json.dumps(state.snapshot()).encode())
        return self.answer(405, b"{}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("upstream")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    upstream = urllib.parse.urlsplit(args.upstream)
    if upstream.scheme != "http" or not upstream.hostname:
        parser.error("UPSTREAM must be http://HOST:PORT")
    server = Server((args.host, args.port), Handler)
    server.state = State()
    server.upstream = upstream
    server.verbose = args.verbose
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
