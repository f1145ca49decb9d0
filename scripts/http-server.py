#!/usr/bin/env python3
"""A static HTTP server for the import tests: serves ROOT on 127.0.0.1:PORT with the
headers dsv's HTTP import reads (ETag, Last-Modified, Content-Length) and honours If-Match
(412 when the file changed), as web servers and CDNs do.

Usage: http-server.py ROOT PORT
"""
import http.server
import os
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    def etag(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            return None
        stat = os.stat(path)
        return '"%x-%x"' % (stat.st_mtime_ns, stat.st_size)

    def send_head(self):
        tag = self.etag()
        wanted = self.headers.get("If-Match")
        if tag and wanted and wanted.strip() not in ("*", tag):
            self.send_error(412, "Precondition Failed")
            return None
        return super().send_head()

    def end_headers(self):
        tag = self.etag()
        if tag:
            self.send_header("ETag", tag)
        super().end_headers()

    def log_message(self, format, *args):
        pass


if __name__ == "__main__":
    root, port = sys.argv[1], int(sys.argv[2])
    os.makedirs(root, exist_ok=True)
    handler = lambda *a, **k: Handler(*a, directory=root, **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.serve_forever()
