"""Network waits and failures: one timeout for every wait, and one line for every failure.

A wait is bounded: no byte for :func:`network_timeout` seconds (``SHARDKIT_NETWORK_TIMEOUT``,
default 60) is an error naming the URL, set through each library's own per-read timeout
(aiohttp's ``sock_read`` for http(s), botocore's ``read_timeout`` for S3, httpx's for the Hub),
never a limit on a whole transfer. Other protocols keep their library's defaults. Two waits of an
S3 upload have no such setting in aiohttp, which s3fs sends through: the wait for ``100
Continue`` and a body the server stops reading; Ctrl-C still ends them.

What a server answers is held to the same rule: only a 404 means a file is missing (any other
error answer, and a redirect loop, is one line naming the URL).

A read over http(s) or the Hub survives transient failures (:func:`is_transient`: a refused,
reset or cut connection, a timeout, an answer 408, 429, 500, 502, 503 or 504): it waits
(:func:`retry_wait`) and asks again from the next byte it has not given. At most
:func:`network_retries` failures in a row with less than :data:`PROGRESS_BYTES` read between
them (``SHARDKIT_NETWORK_RETRIES``, default 8; 0: none), then one line.
"""

from __future__ import annotations

import math
import os
import random
from typing import Any

from ..errors import NetworkError, UsageError, server_text

#: The one setting for every network wait: seconds without a byte before a read or write fails.
TIMEOUT_VARIABLE = "SHARDKIT_NETWORK_TIMEOUT"
DEFAULT_NETWORK_TIMEOUT = 60.0
RESUME = "Try again: pack and push resume where they stopped."

#: The one setting for retries of a read: failures in a row, without PROGRESS_BYTES read, before it fails.
RETRIES_VARIABLE = "SHARDKIT_NETWORK_RETRIES"
DEFAULT_NETWORK_RETRIES = 8
#: The first wait before a retry, in seconds (doubled after each failure in a row, up to
#: :data:`MAX_RETRY_WAIT`); a setting so that tests need not wait.
RETRY_WAIT_VARIABLE = "SHARDKIT_RETRY_WAIT"
DEFAULT_RETRY_WAIT = 0.5
MAX_RETRY_WAIT = 30.0
#: The longest wait a server's ``Retry-After`` (or a 429's ``RateLimit`` reset) is honoured for: a
#: longer one is cut to this (a read answered 429 again counts one more failure of its budget).
MAX_ASKED_WAIT = 60.0
#: Bytes a read must take between two failures for the second to start a new count: a server
#: that sends a few bytes and cuts every time must not keep a read alive for ever.
PROGRESS_BYTES = 1 << 20
#: The answers a retry may cure: the server is busy, restarting, or asks to slow down.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def network_timeout() -> float:
    """Seconds a network read, write or connect may wait without progress (``SHARDKIT_NETWORK_TIMEOUT``).

    Read from the environment, not passed as an argument: readers run in DataLoader workers and
    Dask workers that a call cannot reach, and each of them inherits or sets its environment.
    """
    return _seconds_setting(TIMEOUT_VARIABLE, DEFAULT_NETWORK_TIMEOUT, "above 0 (e.g. 60)", zero=False)


def _seconds_setting(variable: str, default: float, rule: str, *, zero: bool) -> float:
    """A number of seconds from the environment (``default`` when unset): finite, 0 or more
    (``zero``) or above 0; else a UsageError saying ``rule``."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
        raise UsageError(f"{variable}={raw!r} is not a number of seconds {rule}")
    return value


def network_retries() -> int:
    """Failures of a read in a row, with less than :data:`PROGRESS_BYTES` read between them, that are retried
    (``SHARDKIT_NETWORK_RETRIES``, default 8; 0: none). Read from the environment, as
    :func:`network_timeout` is."""
    raw = os.environ.get(RETRIES_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_NETWORK_RETRIES
    if not raw.isdigit():
        raise UsageError(f"{RETRIES_VARIABLE}={raw!r} is not a whole number of retries, 0 or more (e.g. 8)")
    return int(raw)


def first_retry_wait() -> float:
    """Seconds before the first retry (``SHARDKIT_RETRY_WAIT``, default 0.5)."""
    return _seconds_setting(RETRY_WAIT_VARIABLE, DEFAULT_RETRY_WAIT, "0 or more (e.g. 0.5)", zero=True)


def retry_wait(failures: int, asked: float | None, first: float) -> float:
    """Seconds to wait after ``failures`` failures in a row (1, 2...): the ``first`` wait doubled
    each time up to :data:`MAX_RETRY_WAIT`, between half and all of it at random (so that many
    readers a server turned away do not come back at once), or the wait the server asked for
    (``Retry-After``) if longer, up to :data:`MAX_ASKED_WAIT`."""
    wait: float = min(first * 2.0 ** (failures - 1), MAX_RETRY_WAIT)
    return max(wait * random.uniform(0.5, 1.0), min(float(asked or 0), MAX_ASKED_WAIT))


def asked_wait(response: Any) -> int | None:
    """Seconds an answer asks the client to wait before it retries, as huggingface_hub reads
    them (``Retry-After`` in seconds; a 429's ``RateLimit`` reset), or None."""
    from huggingface_hub.utils import parse_ratelimit_headers  # type: ignore[attr-defined]

    waits = []
    retry_after = response.headers.get("retry-after", "").strip()
    if retry_after.isdigit():
        waits.append(int(retry_after))
    limits = parse_ratelimit_headers(response.headers) if response.status_code == 429 else None
    if limits is not None and limits.remaining == 0:
        waits.append(int(limits.reset_in_seconds))
    return max(waits, default=None)


def is_transient(exc: BaseException) -> bool:
    """Whether a failed read may succeed if asked again: a timeout, a refused, reset or cut
    connection, or an answer in :data:`TRANSIENT_STATUSES` (not a 404, 401, 403, 416, another
    4xx, a redirect loop, nor a URL httpx cannot send)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"TooManyRedirects", "UnsupportedProtocol", "LocalProtocolError", "InvalidURL"}:
        return False
    if is_timeout(exc) or is_network_error(exc):
        return True
    answer = _answer(exc)
    return answer is not None and answer[0] in TRANSIENT_STATUSES


def is_timeout(exc: BaseException) -> bool:
    """Whether a library's error is a timeout: each raises its own (httpx's ReadTimeout, aiohttp's
    ServerTimeoutError, botocore's ReadTimeoutError, asyncio's TimeoutError...)."""
    return isinstance(exc, TimeoutError) or any("Timeout" in cls.__name__ for cls in type(exc).__mro__)


#: The base classes of the network errors of httpx (huggingface_hub 1.x), httpx2 (2.x) and aiohttp.
_NETWORK_ERRORS = frozenset(
    {"TransportError", "NetworkError", "TimeoutException", "ClientConnectionError", "ClientPayloadError"}
)


def is_network_error(exc: BaseException) -> bool:
    """Whether a library's error is a failed connection (refused, reset, cut mid-body)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, ConnectionError) or bool(names & _NETWORK_ERRORS)


def timeout_error(what: str, timeout: float, then: str = RESUME) -> NetworkError:
    """The one-line message for a wait that timed out: what, from where, how long, and what next."""
    return NetworkError(
        f"timed out {what}: nothing from the server for {timeout:g} s ({TIMEOUT_VARIABLE}={timeout:g};"
        " raise it for a slow server)."
        f" {then}"
    )


def _answer(exc: BaseException) -> tuple[int, str] | None:
    """The HTTP status and reason behind a library's error (aiohttp's ClientResponseError,
    httpx's HTTPStatusError, huggingface_hub's HfHubHTTPError), or None."""
    status = getattr(exc, "status", None)  # aiohttp
    reason = getattr(exc, "message", "")
    response = getattr(exc, "response", None)  # httpx and huggingface_hub
    if not isinstance(status, int) and response is not None:
        status, reason = getattr(response, "status_code", None), getattr(response, "reason_phrase", "")
    return (status, str(reason or "")) if isinstance(status, int) else None


def _is_missing(exc: BaseException) -> bool:
    """Whether a FileNotFoundError really means the file is not there: fsspec's http(s) filesystem
    raises one for any failed request (a 429, a 503, a redirect loop), keeping the cause; only a
    404 (or no HTTP answer behind it at all) means missing."""
    cause = exc.__cause__
    if not isinstance(exc, FileNotFoundError):
        return False
    if cause is None:
        answer = _answer(exc)
        return answer is None or answer[0] == 404
    answer = _answer(cause)
    return answer is not None and answer[0] == 404


def network_failure(exc: BaseException, doing: str, timeout: float, then: str = RESUME) -> NetworkError | None:
    """The one-line error for a timeout, a failed connection (refused, cut mid-body), a redirect
    loop or an HTTP error answer other than 404 while ``doing`` ("reading <URL>"); None for any
    other failure. fsspec's http(s) filesystem hides them all behind a FileNotFoundError: its
    cause tells."""
    cause = exc.__cause__ if isinstance(exc, FileNotFoundError) else None
    if is_timeout(exc) or (cause is not None and is_timeout(cause)):
        return timeout_error(doing, timeout, then)
    failed = cause if cause is not None else exc
    if any(cls.__name__ == "TooManyRedirects" for cls in type(failed).__mro__):  # httpx's and aiohttp's
        return NetworkError(f"{doing}: the server redirected too many times (a redirect loop?). {then}")
    answer = _answer(failed)
    if answer is not None and not (isinstance(exc, FileNotFoundError) and _is_missing(exc)):
        return NetworkError(f"{doing}: {answered(*answer)}. {then}")
    if is_network_error(failed):
        said = server_text(str(failed))
        return NetworkError(f"the connection failed {doing} ({type(failed).__name__}: {said}). {then}")
    if any(cls.__name__ == "DecodingError" for cls in type(failed).__mro__):  # httpx: a body that does not decode
        said = server_text(str(failed))
        return NetworkError(f"{doing}: the server's answer does not decode ({said}). {then}")
    return None


def answered(status: int, reason: str) -> str:
    """``the server answered 429 Too Many Requests``: what a message says of an HTTP error answer."""
    return f"the server answered {status} {server_text(reason)}".rstrip()
