"""A misbehaving HTTP server for the remote-pack fault tests (test_packs_remote_faults.py).

``python flaky_http.py ROOT PORT`` serves the folder ROOT on 127.0.0.1:PORT.
``GET /FAULT/N/PATH`` answers ``ROOT/PATH``, byte ranges (``Range: bytes=a-b``) included,
except that the first N requests of each path misbehave as FAULT says:

- ``500``, ``503``: that status, with a short text body;
- ``drop``: the headers of the whole answer, half its body, then the connection is closed;
- ``short``: a range request is answered with the first half of the range, honestly
  (its Content-Length and Content-Range say so); a request without a range is answered
  whole (a manifest's size is not known beforehand: only ranges can be short);
- ``stall``: the headers and half the body, then nothing until the client closes;
- ``ok``: never.

``GET /reset`` forgets the counts. Every answer closes its connection, so that a client
holding a socket after a fetch holds it by a leak, not by a connection pool. Standard
library only: the test starts it as a subprocess and ends it.
"""
from __future__ import annotations

import os
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("ok", "500", "503", "drop", "short", "stall")
RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counts: dict = {}
    lock = threading.Lock()

    def log_message(self, *args):     # quiet: a test reads only what its fetch raised
        pass

    def do_GET(self):
        if self.path == "/reset":
            with self.lock:
                self.counts.clear()
            return self.answer(200, b"reset")
        parts = self.path.split("/", 3)
        if len(parts) != 4 or parts[1] not in FAULTS or not parts[2].isdigit():
            return self.answer(400, f"expected /FAULT/N/PATH, FAULT one of {FAULTS}".encode())
        fault, times, name = parts[1], int(parts[2]), parts[3]
        path = os.path.join(ROOT, *name.split("/"))
        if ".." in name.split("/") or not os.path.isfile(path):
            return self.answer(404, b"not found")
        with self.lock:
            self.counts[self.path] = seen = self.counts.get(self.path, 0) + 1
        with open(path, "rb") as f:
            data = f.read()
        status, headers, body = self.ranged(data)
        if status == 206 and seen <= times and fault == "short":
            body = body[:len(body) // 2]
            start = int(RANGE.match(self.headers["Range"]).group(1))
            headers["Content-Range"] = f"bytes {start}-{start + len(body) - 1}/{len(data)}"
        if seen > times or fault in ("ok", "short"):
            return self.answer(status, body, headers)
        if fault in ("500", "503"):
            return self.answer(int(fault), b"server error")
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body[:len(body) // 2])
        self.wfile.flush()
        if fault == "stall":
            self.connection.settimeout(60)
            try:
                self.connection.recv(1)       # b"" once the client has closed: the stall is over
            except OSError:
                pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:                       # the client has gone already
            pass
        self.close_connection = True

    def ranged(self, data):
        """``(status, headers, body)`` of ``data`` for this request's Range header."""
        given = self.headers.get("Range")
        if given is None:
            return 200, {}, data
        start, end = RANGE.match(given).groups()
        start, end = int(start), min(int(end) if end else len(data) - 1, len(data) - 1)
        if start >= len(data):
            return 416, {"Content-Range": f"bytes */{len(data)}"}, b""
        return 206, {"Content-Range": f"bytes {start}-{end}/{len(data)}"}, data[start:end + 1]

    def answer(self, status, body, headers=None):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


if __name__ == "__main__":
    ROOT = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler)
    server.daemon_threads = True
    server.serve_forever()
