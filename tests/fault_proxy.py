"""An HTTP proxy on 127.0.0.1 that breaks requests on purpose, for the fault tests.

It stands in front of one of the test servers (:mod:`tests.http_server`, :mod:`tests.hub_server`,
moto's S3): a client is pointed at ``proxy.url`` instead of the server's. Each request is read
whole (or, for a stalled upload, in part), then either passed on or broken as the first
:class:`Fault` that matches it says:

- ``stall``: read the request, never answer (a server that accepts and then hangs);
- ``stall_upload``: read the headers and ``after`` bytes of the body, then stop reading (and
  never say ``100 Continue`` to a client that waits for it);
- ``stall_body``: pass the request on, relay the answer's headers and ``after`` bytes of its
  body, then send nothing more;
- ``cut_body``: the same, then close the connection;
- ``status``: answer ``status`` (500, 503...) without asking the server, with ``headers``
  (``Retry-After``...) and ``body`` (``None``: a JSON error; ``ECHO``: the request's own head,
  as a server that echoes what it got does);
- ``redirect``: answer ``status`` (307...) with ``Location: to`` (a path; ``""``: the request's
  own path, a redirect loop);
- ``endless``: answer ``status`` (200) with a body of ``size`` bytes of ``fill`` made as they are
  sent, with no length, until the client hangs up; ``sent`` counts the bytes it took.

A fault breaks ``times`` matching requests (None: all) and counts them in ``hits``, so a test can
check that the fault it set up really happened. ``every``: only each ``every``-th request it
matches (``seen`` counts them; the others go on to the next fault), so that faults recur by
count, deterministically: a soak test. ``after=RANDOM``: a stall or cut at a point of the body
drawn from ``random.Random(seed)``. A stalled connection stays open until the
client gives up or the proxy stops. Every connection carries one request (the answer says
``Connection: close``), so a fault meets exactly the request it matched. ``Expect:
100-continue`` is answered by the proxy itself, as a reverse proxy in front of a server does.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO
from urllib.parse import urlsplit

MODES = ("stall", "stall_upload", "stall_body", "cut_body", "status", "redirect", "endless")
ECHO = b"<echo>"  # a status fault's body that echoes the request's head
RANDOM = -1  # a fault's ``after``: a point of the body drawn at random (from its ``seed``)


@dataclass
class Fault:
    mode: str
    method: str | None = None  # None: any method
    path: str = ""  # a regular expression searched in the request's path
    after: int = 0  # body bytes passed before a stall or a cut (RANDOM: drawn from ``seed``)
    status: int = 503
    times: int | None = None  # how many matching requests to break; None: all
    headers: dict[str, str] = field(default_factory=dict)  # more headers of a status, redirect or endless answer
    body: bytes | None = None  # a status answer's body (None: a JSON error; ECHO: the request's head)
    to: str = ""  # where a redirect points (a path; "": the request's own)
    size: int = 0  # bytes of an endless answer
    fill: bytes = b"["
    hits: int = 0
    sent: int = 0  # bytes of an endless answer the client took
    every: int = 1  # break each ``every``-th matching request only
    seed: int = 0  # of the points a RANDOM cut or stall is drawn at
    seen: int = 0  # matching requests, broken or not

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown fault mode {self.mode!r}")
        self._random = random.Random(self.seed)

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return (self.method is None or self.method == method) and re.search(self.path, path) is not None

    def body_bytes(self, length: int | None) -> int:
        """Bytes of a body of ``length`` passed before the stall or cut."""
        if self.after != RANDOM:
            return self.after
        return self._random.randrange(length or 1 << 16)


@dataclass
class ProxyLog:
    entries: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, fault mode
    ranges: list[tuple[str, str | None]] = field(default_factory=list)  # path, Range header of each request

    def faulted(self) -> list[tuple[str, str, str | None]]:
        return [e for e in self.entries if e[2] is not None]


_STATUS_TEXT = {
    200: "OK",
    307: "Temporary Redirect",
    308: "Permanent Redirect",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class FaultProxy:
    """Start with :func:`run_fault_proxy`; point the client at ``url``."""

    def __init__(self, upstream: str) -> None:
        split = urlsplit(upstream)
        assert split.hostname is not None and split.port is not None, upstream
        self.upstream = (split.hostname, split.port)
        self.faults: list[Fault] = []
        self.log = ProxyLog()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.held: set[socket.socket] = set()  # connections a fault keeps open, closed on stop
        self.url = ""
        self._server: socketserver.ThreadingTCPServer | None = None

    def set(self, *faults: Fault) -> list[Fault]:
        """Replace the faults (none: pass everything through); returns them, to read ``hits`` later."""
        with self.lock:
            self.faults = list(faults)
        return list(faults)

    def _pick(self, method: str, path: str, byte_range: str | None = None) -> Fault | None:
        with self.lock:
            fault = None
            for candidate in self.faults:
                if candidate.matches(method, path):
                    candidate.seen += 1
                    if candidate.seen % candidate.every == 0:
                        fault = candidate
                        fault.hits += 1
                        break
            self.log.entries.append((method, path, fault.mode if fault else None))
            self.log.ranges.append((path, byte_range))
            return fault

    def start(self) -> None:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(OSError):  # a client that gave up (its timeout) hangs up mid-answer
                    proxy._handle(self.request)

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=True)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            for conn in self.held:
                conn.close()
            self.held.clear()

    # -- one connection, one request -----------------------------------------------------------------
    def _hold(self, conn: socket.socket) -> None:
        """Keep the connection open, silent, until the client hangs up or the proxy stops."""
        with self.lock:
            self.held.add(conn)
        try:
            while not self.stopping.wait(0.1):
                try:  # the client's own timeout closes its end: nothing left to hold
                    if conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                        return
                except BlockingIOError:
                    continue
                except OSError:
                    return
        finally:
            with self.lock:
                self.held.discard(conn)

    def _handle(self, conn: socket.socket) -> None:
        reader: BinaryIO = conn.makefile("rb")
        head = _read_head(reader)
        if head is None:
            return
        request_line, headers = head
        method, target = request_line.split(" ", 2)[:2]
        path = urlsplit(target).path
        fault = self._pick(method, path, _header(headers, "range"))
        if (_header(headers, "expect") or "").lower() == "100-continue":
            # Answered here, as a reverse proxy (nginx) in front of a server does: the client
            # (botocore) sends the body only then, and the server is asked without it.
            headers = [(n, v) for n, v in headers if n.lower() != "expect"]
            if fault is None or fault.mode != "stall_upload":
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if fault is not None and fault.mode == "stall_upload":
            if fault.after:
                reader.read(fault.after)
            self._hold(conn)
            return
        body = _read_body(reader, headers)
        if fault is not None and fault.mode == "stall":
            self._hold(conn)
            return
        if fault is not None and fault.mode == "status":
            text = f'{{"error": "injected {fault.status} from the fault proxy"}}'.encode()
            if fault.body == ECHO:
                text = _head_bytes(request_line, headers)
            elif fault.body is not None:
                text = fault.body
            conn.sendall(_answer_head(fault, {"Content-Type": "application/json", "Content-Length": str(len(text))}))
            conn.sendall(text)
            return
        if fault is not None and fault.mode == "redirect":
            conn.sendall(_answer_head(fault, {"Location": fault.to or target, "Content-Length": "0"}))
            return
        if fault is not None and fault.mode == "endless":
            conn.sendall(_answer_head(fault, {"Content-Type": "application/json"}))
            block = fault.fill * (65536 // len(fault.fill))
            while fault.sent < fault.size:  # the client hanging up ends it (an OSError, taken by the handler)
                chunk = block[: fault.size - fault.sent]
                conn.sendall(chunk)
                with self.lock:
                    fault.sent += len(chunk)
            return
        with socket.create_connection(self.upstream) as upstream:
            upstream.sendall(_head_bytes(request_line, headers) + body)
            self._relay_answer(upstream, conn, fault)

    def _relay_answer(self, upstream: socket.socket, conn: socket.socket, fault: Fault | None) -> None:
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = upstream.recv(65536)
            if not chunk:
                conn.sendall(buffer)
                return
            buffer += chunk
        raw_head, _, rest = buffer.partition(b"\r\n\r\n")
        status_line, *lines = raw_head.decode("latin-1").split("\r\n")
        headers = [(n.strip(), v.strip()) for n, _, v in (line.partition(":") for line in lines)]
        conn.sendall(_head_bytes(status_line, headers))
        limit = None
        if fault is not None and fault.mode in ("stall_body", "cut_body"):
            length = _header(headers, "content-length")
            with self.lock:  # requests are handled on threads: one draw at a time
                limit = fault.body_bytes(int(length) if length and length.isdigit() else None)
        sent = 0
        while True:
            if limit is not None and sent + len(rest) >= limit:
                conn.sendall(rest[: limit - sent])
                if fault is not None and fault.mode == "stall_body":
                    self._hold(conn)
                return  # cut_body: the connection closes here, the body unfinished
            conn.sendall(rest)
            sent += len(rest)
            rest = upstream.recv(65536)
            if not rest:
                return


def _answer_head(fault: Fault, headers: dict[str, str]) -> bytes:
    """The head of an answer the proxy makes itself: ``fault.status`` with ``headers`` and the fault's own."""
    status_line = f"HTTP/1.1 {fault.status} {_STATUS_TEXT.get(fault.status, 'Error')}"
    return _head_bytes(status_line, [*headers.items(), *fault.headers.items()])


def _read_head(reader: BinaryIO) -> tuple[str, list[tuple[str, str]]] | None:
    request_line = reader.readline().decode("latin-1").rstrip("\r\n")
    if not request_line:
        return None
    headers = []
    while True:
        line = reader.readline().decode("latin-1").rstrip("\r\n")
        if not line:
            break
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return request_line, headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for n, v in headers if n.lower() == name), None)


def _read_body(reader: BinaryIO, headers: list[tuple[str, str]]) -> bytes:
    """The request body as sent (chunked framing kept), so it can be passed on unchanged."""
    if (_header(headers, "transfer-encoding") or "").lower() == "chunked":
        parts = []
        while True:
            size_line = reader.readline()
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    line = reader.readline()
                    parts.append(line)
                    if line in (b"\r\n", b"\n", b""):
                        break
                return b"".join(parts)
            parts.append(reader.read(size + 2))
    length = int(_header(headers, "content-length") or 0)
    return reader.read(length) if length else b""


def _head_bytes(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    """A request or response head with ``Connection: close``: one request per connection."""
    lines = [first_line] + [f"{n}: {v}" for n, v in headers if n.lower() not in ("connection", "keep-alive")]
    return ("\r\n".join([*lines, "Connection: close"]) + "\r\n\r\n").encode("latin-1")


@contextmanager
def run_fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    """A proxy in front of ``upstream`` (``http://127.0.0.1:PORT[/...]``), passing everything through until told."""
    proxy = FaultProxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
