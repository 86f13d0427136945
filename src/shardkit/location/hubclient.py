"""huggingface_hub's HTTP client held to shardkit's bounds (:func:`bounded_hub_requests`).

In a push and a ``verify`` of ``hf://``, huggingface_hub's client is kept from waiting longer
than asked, reading an answer without end, or following an upload's redirect.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import NetworkError, ShardkitError, server_text
from .network import TIMEOUT_VARIABLE, TRANSIENT_STATUSES, answered, asked_wait
from .reading import MAX_API_BODY_BYTES, MAX_ERROR_BODY_BYTES


def _body_limit(response: Any) -> int | None:
    """How much of an answer huggingface_hub may read into memory: an error or a redirect, a bit;
    an API answer (JSON it parses whole), :data:`MAX_API_BODY_BYTES`; part of a file (a ranged
    GET, as ``hf://`` reads are), the range asked for; a whole file (a GET outside ``/api/``: a
    ``resolve`` URL or the storage it redirects to), no limit: it is streamed to disk or to a
    reader that knows its size."""
    if response.status_code >= 300:
        return MAX_ERROR_BODY_BYTES
    request = response.request
    if not _is_api(request):
        asked = re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers.get("range", "").strip())
        return int(asked.group(2)) - int(asked.group(1)) + 1 if asked else None
    return MAX_API_BODY_BYTES


def _is_api(request: Any) -> bool:
    """Whether a request of huggingface_hub's is to the Hub's API (its answer JSON, parsed whole),
    not a file download (a GET outside ``/api/``)."""
    return request.method not in ("GET", "HEAD") or "/api/" in request.url.path


@contextlib.contextmanager
def bounded_hub_requests(timeout: float) -> Iterator[None]:
    """In the block, every request huggingface_hub sends waits at most ``timeout`` seconds to
    connect, and for each byte read or written (not for a whole upload); and what a server
    answers cannot make it wait longer, or read without end:

    - an answer asking to wait (``Retry-After``, a 429's ``RateLimit``) more than ``timeout``
      seconds before a retry is one line naming the URL at once (huggingface_hub would sleep that
      long, up to five times; it has no setting to cap it). A shorter wait is honoured, so its
      retries of one request wait five times ``timeout`` at most;
    - an answer's body is read up to a limit (:func:`_body_limit`), past which it is one line;
    - a 307 or 308 redirect of an upload is one line: its body is a file huggingface_hub has
      already read, which httpx cannot send again (it would fail with a traceback). Uploads go
      where the Hub says (its storage's URL is for the right region), so it is refused, not followed.

    Its shared HTTP client has no timeout, and most ``HfApi`` calls (the uploads, the commits)
    pass none, so a Hub that stops answering mid-upload hung the push forever. Request and
    response hooks go on the client that the current factory makes, so a user's factory (a
    proxy, certificates) still applies; that factory is put back when the block ends normally.
    """
    from huggingface_hub.utils import _http, set_client_factory  # type: ignore[attr-defined]

    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)
    bound, check = _bounding_request(timeout), _checking_response(timeout)

    def factory() -> Any:
        client = previous()
        hooks = client.event_hooks
        client.event_hooks = {
            "request": [*hooks.get("request", []), bound],
            "response": [*hooks.get("response", []), check],
        }
        return client

    set_client_factory(factory)
    yield
    # Not on an error: the threads of a pool left on the way out may still be mid-request on this
    # client, and putting the factory back closes it under them (each then retries, and logs it).
    set_client_factory(previous)


def _bounding_request(timeout: float) -> Callable[[Any], None]:
    """The request hook: each of its waits bounded by ``timeout`` where it sets none, and an API
    answer asked for uncompressed."""

    def bound(request: Any) -> None:
        limits = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            kind: timeout if limits.get(kind) is None else limits[kind] for kind in ("connect", "read", "write", "pool")
        }
        if _is_api(request):  # its bound counts the bytes sent: a compressed body could hold a thousand times more
            request.headers["Accept-Encoding"] = "identity"

    return bound


def _checking_response(timeout: float) -> Callable[[Any], None]:
    """The response hook: an answer refused in one line (:func:`_refusal`), or its body bounded."""
    import httpx2

    class bounded_body(httpx2.SyncByteStream):
        """An answer's body that fails with one line naming the request past ``limit`` bytes."""

        def __init__(self, stream: Any, limit: int, request: str) -> None:
            self._stream = stream
            self._limit = limit
            self._request = request

        def __iter__(self) -> Iterator[bytes]:
            seen = 0
            for chunk in self._stream:
                seen += len(chunk)
                if seen > self._limit:
                    raise ShardkitError(
                        f"{self._request}: the server's answer is over {self._limit} bytes, far more than it"
                        " should be; not read further (check HF_ENDPOINT, and the proxy if any)"
                    )
                yield chunk

        def close(self) -> None:
            self._stream.close()

    def check(response: Any) -> None:
        request = response.request
        replayable = isinstance(request.stream, httpx2.ByteStream)
        if (refused := _refusal(response, timeout, replayable)) is not None:
            raise refused
        limit = _body_limit(response)
        if limit is not None and not isinstance(response.stream, httpx2.ByteStream):
            response.stream = bounded_body(response.stream, limit, f"{request.method} {request.url}")

    return check


def _refusal(response: Any, timeout: float, replayable: bool) -> NetworkError | None:
    """The one line for an answer shardkit does not follow (a wait longer than ``timeout``, an
    upload redirected, an API answer compressed though asked not to be), or None."""
    request = response.request
    url = str(request.url)
    what = answered(response.status_code, response.reason_phrase)
    wait = asked_wait(response) if response.status_code in TRANSIENT_STATUSES else None  # what http_backoff retries
    if wait is not None and wait > timeout:
        return NetworkError(
            f"{request.method} {url}: {what} and asked to wait {wait} s before trying again, longer than"
            f" {TIMEOUT_VARIABLE}={timeout:g} allows. Try again later: pack and push resume where they stopped."
        )
    if response.status_code in (307, 308) and not replayable and request.method not in ("GET", "HEAD"):
        return NetworkError(
            f"{request.method} {url}: {what} (to {response.headers.get('location', '?')}) for an upload;"
            " shardkit does not send an upload again to where a server redirects it. Check HF_ENDPOINT"
            " (and the proxy, if any)."
        )
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if _body_limit(response) is not None and _is_api(request) and encoding not in ("", "identity"):
        return NetworkError(
            f"{request.method} {url}: {what}, compressed ({server_text(encoding)}) though asked not to be"
        )
    return None
