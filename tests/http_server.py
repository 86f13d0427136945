"""A static file server on 127.0.0.1 with HTTP Range support and a request log, for tests.

Python's http.server ignores Range; readers that stream ZIPs (fsspec's HTTP files) depend on it.
Every request is logged as (method, path, range header) so tests can count requests.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class RequestLog:
    entries: list[tuple[str, str, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, path: str, range_header: str | None) -> None:
        with self.lock:
            self.entries.append((method, path, range_header))

    def count(self, prefix: str = "") -> int:
        with self.lock:
            return sum(1 for _, path, _ in self.entries if path.startswith(prefix))

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


class QuietServer(ThreadingHTTPServer):
    """A threading server that does not print a traceback when a client hangs up mid-answer
    (readers that stop early, like `break` out of a dataset loop, do that on purpose)."""

    daemon_threads = True
    # socketserver's default backlog is 5: a client opening ~16 connections at once (datasets'
    # parquet reader) saw the kernel drop the extra SYNs and retried each after 1 s.
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


def send_file(
    handler: BaseHTTPRequestHandler,
    path: Path,
    *,
    send_body: bool,
    headers: dict[str, str] | None = None,
    honour_range: bool = True,
) -> None:
    """Answer with ``path``'s bytes, honouring a ``Range: bytes=a-b`` header (206) as real servers
    do; ``honour_range=False``: the whole file (200), as a server without Range support does."""
    size = path.stat().st_size
    start, end = 0, size - 1
    status = 200
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", handler.headers.get("Range", "") if honour_range else "")
    if match and (match.group(1) or match.group(2)):
        if match.group(1):
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
        else:  # suffix range: the last N bytes
            start = max(size - int(match.group(2)), 0)
        if start >= size:
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{size}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        status = 206
    handler.send_response(status)
    handler.send_header("Accept-Ranges", "bytes")
    handler.send_header("Content-Length", str(end - start + 1))
    if status == 206:
        handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    if send_body and end >= start:  # (an empty file has no byte to send; sendfile refuses a count of 0)
        # The kernel copies the file to the socket (the handler's wfile is unbuffered: the headers
        # are out): a server on this machine should take as little of its CPU as a remote one.
        with open(path, "rb") as f:
            handler.connection.sendfile(f, start, end - start + 1)


def _handler(root: Path, log: RequestLog, honour_range: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else each response waits ~40 ms on delayed ACKs

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _resolve(self) -> Path | None:
            rel = unquote(urlsplit(self.path).path).lstrip("/")
            path = (root / rel).resolve()
            if root not in path.parents and path != root:
                return None
            return path if path.is_file() else None

        def _respond(self, send_body: bool) -> None:
            log.add(self.command, urlsplit(self.path).path, self.headers.get("Range"))
            path = self._resolve()
            if path is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            send_file(self, path, send_body=send_body, honour_range=honour_range)

        def do_GET(self) -> None:
            self._respond(send_body=True)

        def do_HEAD(self) -> None:
            self._respond(send_body=False)

    return Handler


@contextmanager
def serve_handler(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler``'s answers on 127.0.0.1 (a free port); yield the base URL, ending in '/'."""
    server = QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_directory(root: Path, *, honour_range: bool = True) -> Iterator[tuple[str, RequestLog]]:
    """Serve ``root`` on 127.0.0.1 (a free port); yield (base URL ending in '/', request log).
    ``honour_range=False``: answer every GET with the whole file, as a server without Range does."""
    log = RequestLog()
    with serve_handler(_handler(Path(os.path.realpath(root)), log, honour_range)) as url:
        yield url, log
