"""The remote-pack tests' HTTP server where nginx is not installed: aiohttp's static files.

``python static_http.py ROOT PORT`` serves the folder ROOT on 127.0.0.1:PORT until it is
ended. aiohttp (pinned in the ``test`` extra, and the ``remote`` extra's own client) answers
``GET`` and ``HEAD`` of a file with its ``FileResponse``: byte ranges (``Range: bytes=a-b``,
``206`` with ``Content-Range``, ``416`` past the end), ``ETag`` and ``Last-Modified``, as nginx
does, so that the tests run the same requests against a real server either way
(``remote_packs.http_server`` picks the server). A subprocess, not a thread of the test:
worker processes forked by the tests must not inherit a running event loop.
"""
from __future__ import annotations

import sys

from aiohttp import web


def main(argv) -> None:
    if len(argv) != 2 or not argv[1].isdigit():
        raise SystemExit(f"usage: python static_http.py ROOT PORT (received {argv!r})")
    root, port = argv[0], int(argv[1])
    app = web.Application()
    # No index: a folder's URL is a 403, as nginx answers without autoindex.
    app.router.add_static("/", root, show_index=False, follow_symlinks=False)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main(sys.argv[1:])
