#!/usr/bin/env python3
"""A TCP proxy that adds a fixed latency to every request, for the remote-read benchmarks.

Usage:
  scripts/latency-proxy.py UPSTREAM_PORT [--delay-ms MS] [--port N] [--host H] [--upstream-host H]
  scripts/latency-proxy.py --self-test [--self-test-mb MB]

  UPSTREAM_PORT   the server's port (on --upstream-host, default 127.0.0.1)
  --delay-ms      latency added to every byte the client sends (default 20): a request reaches
                  the server MS milliseconds after the client sent it, as a real object store
                  answers a GET's first byte 10-50 ms after the request
  --port          the port to listen on; 0 (the default) picks a free one
  --stats FILE    on SIGUSR1, write "UP DOWN CONNECTIONS REQUESTS" to FILE (atomically): bytes
                  client -> server, bytes server -> client, connections, and HTTP/1.1 request
                  lines seen, all since the start (the bytes on the wire of what went through)
  Prints the port it listens on as the first line of stdout, then serves until killed.

It works on bytes, not HTTP: each connection to the proxy gets one connection to the upstream.
Client -> server: a reader thread stamps every chunk it receives and a writer thread sends each
chunk when its stamp is MS old, so the bytes of every request are delayed by MS and nothing
else (a request sent while an earlier one waits is not delayed twice; an upload is not slowed
beyond MS). Server -> client: forwarded as it comes, zero-copy with os.splice through a pipe
(Python 3.10+, Linux), so the proxy is not the bottleneck of a download: --self-test measures
that (a sendfile upstream in a process of its own, the proxy at 0 ms, one `curl` GET of
--self-test-mb MB through it, best of 3, beside the same GET straight from the upstream)
and prints "proxy throughput: X GB/s" (exit 1 below 1.5 GB/s).
"""

import argparse
import collections
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, missing from Python's fcntl before 3.10 on some builds
PIPE_SIZE = 4 << 20  # root may exceed /proc/sys/fs/pipe-max-size; others get what it allows
SPLICE_MAX = 4 << 20


class Stats:
    """Bytes each way, connections and requests (HTTP/1.1 request lines) since the start."""

    def __init__(self):
        self.lock = threading.Lock()
        self.up = self.down = self.connections = self.requests = 0

    def add(self, up=0, down=0, connections=0, requests=0):
        with self.lock:
            self.up += up
            self.down += down
            self.connections += connections
            self.requests += requests

    def line(self):
        with self.lock:
            return f"{self.up} {self.down} {self.connections} {self.requests}\n"


STATS = Stats()


def make_pipe():
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", F_SETPIPE_SZ), PIPE_SIZE)
    except OSError:
        pass  # a smaller pipe still works; /proc/sys/fs/pipe-max-size may cap it
    return r, w


def close_quietly(*socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def shut_write(sock):
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def upstream_to_client(up, client):
    """Forward the server's bytes to the client as they come: splice(up -> pipe -> client)."""
    r, w = make_pipe()
    try:
        ufd, cfd = up.fileno(), client.fileno()
        while True:
            n = os.splice(ufd, w, SPLICE_MAX)
            if n == 0:
                break
            STATS.add(down=n)
            while n:
                n -= os.splice(r, cfd, n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        shut_write(client)


def client_to_upstream(client, up, delay):
    """Forward the client's bytes to the server, each chunk `delay` seconds after it came."""
    queue = collections.deque()
    cond = threading.Condition()
    done = []

    def writer():
        try:
            while True:
                with cond:
                    while not queue and not done:
                        cond.wait()
                    if not queue:
                        break
                    stamp, data = queue.popleft()
                wait = stamp + delay - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                up.sendall(data)
                STATS.add(up=len(data), requests=data.count(b" HTTP/1.1\r\n"))
        except OSError:
            pass
        finally:
            shut_write(up)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        while True:
            data = client.recv(1 << 20)
            if not data:
                break
            with cond:
                queue.append((time.monotonic(), data))
                cond.notify()
    except OSError:
        pass
    finally:
        with cond:
            done.append(True)
            cond.notify()
    t.join()


def serve_connection(client, upstream, delay):
    try:
        up = socket.create_connection(upstream)
    except OSError:
        close_quietly(client)
        return
    STATS.add(connections=1)
    for s in (client, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    down = threading.Thread(target=upstream_to_client, args=(up, client), daemon=True)
    down.start()
    client_to_upstream(client, up, delay)
    down.join()
    close_quietly(client, up)


def listen(host, port):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(512)
    return srv


def serve(srv, upstream, delay):
    while True:
        client, _ = srv.accept()
        threading.Thread(target=serve_connection, args=(client, upstream, delay), daemon=True).start()


def sendfile_server(srv, path):
    """A minimal HTTP/1.1 upstream for the self-test: every request gets the whole file, sendfile."""
    size = os.path.getsize(path)

    def handle(conn):
        with conn, open(path, "rb") as f:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                _, buf = buf.split(b"\r\n\r\n", 1)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                conn.sendfile(f, 0, size)

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def self_test(mb):
    with tempfile.NamedTemporaryFile(prefix="latency-proxy-") as f:
        block = os.urandom(1 << 20)
        for _ in range(mb):
            f.write(block)
        f.flush()
        up = listen("127.0.0.1", 0)
        server = os.fork()  # the upstream in a process of its own, as a real server is
        if server == 0:
            try:
                sendfile_server(up, f.name)
            finally:
                os._exit(0)
        px = listen("127.0.0.1", 0)
        threading.Thread(target=serve, args=(px, up.getsockname(), 0.0), daemon=True).start()
        results = {}
        for name, port in (("direct", up.getsockname()[1]), ("proxy", px.getsockname()[1])):
            best = None
            for _ in range(3):
                t0 = time.perf_counter()
                out = subprocess.run(
                    ["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}",
                     f"http://127.0.0.1:{port}/x"], check=True, capture_output=True, text=True)
                dt = time.perf_counter() - t0
                if int(out.stdout) != mb << 20:
                    sys.exit(f"latency-proxy self-test: {name} moved {out.stdout} of {mb << 20} bytes")
                best = dt if best is None else min(best, dt)
            results[name] = (mb << 20) / best / 1e9
        os.kill(server, signal.SIGTERM)
        os.waitpid(server, 0)
        print(f"proxy throughput: {results['proxy']:.2f} GB/s through the proxy, "
              f"{results['direct']:.2f} GB/s direct (curl GET of {mb} MiB, best of 3)")
        if results["proxy"] < 1.5:
            sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("upstream_port", type=int, nargs="?")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--upstream-host", default="127.0.0.1")
    ap.add_argument("--stats", metavar="FILE", help="on SIGUSR1, write 'UP DOWN CONNECTIONS REQUESTS' to FILE")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--self-test-mb", type=int, default=1024)
    args = ap.parse_args()
    if args.self_test:
        self_test(args.self_test_mb)
        return
    if args.upstream_port is None:
        ap.error("UPSTREAM_PORT is required (or --self-test)")
    srv = listen(args.host, args.port)
    if args.stats:
        def dump(_sig, _frame):
            tmp = args.stats + ".tmp"
            with open(tmp, "w") as f:
                f.write(STATS.line())
            os.replace(tmp, args.stats)

        signal.signal(signal.SIGUSR1, dump)
    print(srv.getsockname()[1], flush=True)
    serve(srv, (args.upstream_host, args.upstream_port), args.delay_ms / 1000.0)


if __name__ == "__main__":
    main()
