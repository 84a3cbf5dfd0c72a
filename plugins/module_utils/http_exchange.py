# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One HTTP request to a server or router this collection deployed: the one place that talks HTTP for the modules.

Every answer is an answer, whatever its status (an error status comes back with its body, never as an exception);
anything that is not an answer - refused, reset, timed out, a TLS failure, a body cut short, or a body larger than
the caller allows - raises ExchangeError with the reason. Redirects are never followed (a server that redirects is
not the one asked), no proxy is used unless asked, and the API key goes only into the Authorization header.
request() also returns the answer's headers (hf_hub reads the Hub's X-Error-Code and Link pagination from them).
An ExchangeError's reason may quote the peer (a status line that is not one): it is masked by redact, with the API key
in all its forms, and shortened to MAX_REASON_CHARS after that; the answer itself is returned as it came.

``timeout`` is the deadline of the whole exchange - connect, TLS, status line, headers and the whole body - not of
each socket operation: a peer that trickles its answer a byte at a time, or never ends a chunked body, cannot keep a
call more than about a second past it; the call then raises ExchangeError ("timed out: no whole answer within 2.0 s
(...)", saying how far the answer got). In the main thread (a module's process) a SIGALRM timer (signal.setitimer)
interrupts whatever blocks, and the previous SIGALRM handler is put back afterwards. Where that timer cannot be used -
not the main thread (the canary soak's workers), a SIGALRM timer already armed by someone else (left alone), a handler
installed outside Python, no setitimer - a watchdog timer shuts the exchange's socket down at the deadline instead:
every socket this thread connects while the exchange runs is registered (http.client connects through
socket.create_connection, which this module wraps once; the wrapper only records, for a thread inside an exchange),
and a blocked read of a trickled status line, headers or body then returns at once. Each read of the body also gets a
socket timeout of what is left and takes what has arrived (read1). Name resolution is the system resolver's and is not
interrupted: a slow resolver can hold a call past the deadline (the call still fails then).
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import signal
import socket
import threading
import time

from urllib.error import HTTPError

from ansible.module_utils.urls import open_url

from ansible_collections.llmops.serving.plugins.module_utils import redact

# A /metrics page of a busy SGLang is some 100 KiB and a chat completion a few; more than this is not a server of ours.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# What an ExchangeError's reason quotes at most (http.client quotes a bad status line whole, up to 64 KiB).
MAX_REASON_CHARS = 500


class ExchangeError(Exception):
    """No HTTP answer to use (``reason`` says why)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class _DeadlinePassed(BaseException):
    """Raised by the SIGALRM handler inside whatever blocks; a BaseException so that no ``except Exception`` on the
    way (urllib, http.client, ansible's urls) turns it into something else. request() turns it into ExchangeError."""


class _Clock:
    """The deadline of one exchange and how far the answer got (for the reason)."""

    def __init__(self, timeout):
        self.timeout = timeout
        self.end = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        self.body_bytes = None  # None until the status line and headers are in

    def remaining(self):
        """Seconds left (None: no deadline); 0 once it has passed."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def passed(self):
        return self.end is not None and time.monotonic() >= self.end

    def error(self):
        if self.body_bytes is None:
            where = "no status line and headers yet"
        else:
            where = "the peer was still sending, %d bytes of the body so far" % self.body_bytes
        return ExchangeError("timed out: no whole answer within %.1f s (%s)" % (float(self.timeout), where))

    def socket_timeout(self):
        """What is left, for a socket timeout; ExchangeError when nothing is."""
        left = self.remaining()
        if left is not None and left <= 0:
            raise self.error()
        return left


def _alarm_usable():
    """Whether a SIGALRM timer may bound the exchange: the main thread, setitimer present, no timer armed by someone
    else (it is left alone) and a previous handler that can be put back (None: installed outside Python)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0 and signal.getsignal(signal.SIGALRM) is not None


_THREAD = threading.local()
_CREATE_CONNECTION = socket.create_connection


def _recording_create_connection(*args, **kwargs):
    """socket.create_connection, which also records the socket for the watchdog of the exchange this thread is in."""
    sock = _CREATE_CONNECTION(*args, **kwargs)
    sockets = getattr(_THREAD, "sockets", None)
    if sockets is not None:
        sockets.append(sock)
    return sock


def _install_recording():
    # http.client.HTTPConnection takes socket.create_connection when it is built: wrapped before any exchange.
    if socket.create_connection is not _recording_create_connection:
        socket.create_connection = _recording_create_connection


@contextlib.contextmanager
def _watchdog(clock):
    """Shut down the sockets this thread connects inside the block when ``clock``'s deadline passes (where the SIGALRM
    timer cannot be used); the timer is cancelled however the block ends."""
    if clock.end is None:
        yield
        return
    _install_recording()
    sockets = []
    _THREAD.sockets = sockets

    def expire():
        for sock in list(sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(max(clock.remaining(), 0.001), expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _THREAD.sockets = None


@contextlib.contextmanager
def _alarm(clock):
    """A SIGALRM timer that raises _DeadlinePassed at ``clock``'s deadline where it can be used (see the module's
    docstring); the previous handler is restored and the timer disarmed however the block ends."""
    if clock.end is None or not _alarm_usable():
        with _watchdog(clock):
            yield
        return
    armed = [True]

    def on_alarm(signum, frame):
        del signum, frame
        if armed[0]:
            armed[0] = False
            raise _DeadlinePassed()

    try:
        previous = signal.signal(signal.SIGALRM, on_alarm)
    except (ValueError, OSError):  # not the main thread after all
        previous = None
    if previous is None:
        with _watchdog(clock):
            yield
        return
    try:
        # setitimer(0) would disarm: a deadline already passed fires at once instead.
        signal.setitimer(signal.ITIMER_REAL, max(clock.remaining(), 0.001))
        yield
    finally:
        armed[0] = False  # a SIGALRM from here on does nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _socket_of(response):
    """The socket under an HTTPResponse (an HTTPError hands over its ``fp``, the response), or None."""
    for _hop in range(4):
        if isinstance(response, http.client.HTTPResponse):
            raw = getattr(getattr(response, "fp", None), "raw", None)
            return getattr(raw, "_sock", None)
        response = getattr(response, "fp", None)
        if response is None:
            return None
    return None


def _read_bounded(response, max_bytes, clock):
    """The whole body, at most ``max_bytes``; a body that ends before its Content-Length is an error, as read() says.

    Each read takes what has arrived (read1: read(n) waits for n bytes) with a socket timeout of what is left of
    ``clock``, so a body that trickles or never ends fails at the deadline even without the SIGALRM timer.
    read1/read of http.client return what arrived when the connection closes early, so the bytes still owed are
    checked (``length`` of the HTTPResponse; an HTTPError hands attribute reads to its response)."""
    chunks = []
    total = 0
    clock.body_bytes = 0
    sock = _socket_of(response)
    read = getattr(response, "read1", None) or response.read
    while True:
        left = clock.socket_timeout()
        # Python 3.13's read1 closes the connection as soon as the body is complete (3.11 does on the next read): a
        # socket closed under us takes no timeout, and the next read returns the end.
        if sock is not None and left is not None and sock.fileno() != -1:
            sock.settimeout(max(left, 0.001))
        try:
            chunk = read(min(65536, max_bytes + 1 - total))
        except OSError:
            if clock.passed():
                raise clock.error() from None
            raise
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        clock.body_bytes = total
        if total > max_bytes:
            raise ExchangeError("the answer is larger than %d bytes" % max_bytes)
    owed = getattr(response, "length", None)
    if owed:
        raise ExchangeError("the answer ended %d bytes short of its Content-Length" % owed)
    return b"".join(chunks)


Answer = collections.namedtuple("Answer", "status headers text")


def request(url, method="GET", body=None, api_key=None, accept="application/json", timeout=10.0,
            validate_certs=True, use_proxy=False, max_body_bytes=DEFAULT_MAX_BODY_BYTES, ca_path=None,
            use_netrc=True):
    """The Answer (status, headers with lower-case names, body text) of one request to ``url``; ``body``
    (JSON-able) is sent as JSON. ``use_netrc=False`` keeps credentials from ~/.netrc out of the request.
    ``timeout`` (seconds) bounds the whole exchange, body included (see the module's docstring)."""
    headers = {"Accept": accept}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    clock = _Clock(timeout)
    try:
        with _alarm(clock):
            status, answer_headers, raw = _exchange(clock, url, data, headers, method, validate_certs, use_proxy,
                                                    ca_path, use_netrc, max_body_bytes)
    except _DeadlinePassed:
        raise clock.error() from None
    except ExchangeError as exc:
        # A bad status line is quoted up to its line break: a key split across lines ends it cut.
        raise ExchangeError(redact.shortened(exc.reason, MAX_REASON_CHARS, secrets=(api_key,) if api_key else (),
                                             ends_cut=True)) from None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw or "")
    lowered = dict((name.lower(), value) for name, value in (answer_headers.items() if answer_headers else ()))
    return Answer(status, lowered, text)


def _close(response):
    """Close an answer (its connection with it: a peer still sending is not read further); errors do not matter."""
    try:
        response.close()
    except Exception:  # pylint: disable=broad-except
        pass


def _exchange(clock, url, data, headers, method, validate_certs, use_proxy, ca_path, use_netrc, max_body_bytes):
    """(status, headers, body bytes) of the request, inside request()'s deadline."""
    try:
        response = open_url(url, data=data, headers=headers, method=method, timeout=clock.socket_timeout(),
                            validate_certs=validate_certs, use_proxy=use_proxy, follow_redirects="none",
                            ca_path=ca_path, use_netrc=use_netrc)
        try:
            answer_headers = response.headers
            status, raw = response.getcode(), _read_bounded(response, max_body_bytes, clock)
        finally:
            _close(response)
    except HTTPError as exc:
        status = exc.code
        answer_headers = exc.headers
        try:
            raw = _read_bounded(exc, max_body_bytes, clock) or b""
        except ExchangeError:
            raise
        except Exception:  # pylint: disable=broad-except
            raw = b""
        finally:
            _close(exc)
    except ExchangeError:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        # URLError, a timeout, a reset connection, a body cut short, or open_url's ConnectionError/SSLValidationError.
        if clock.passed():
            raise clock.error() from None
        raise ExchangeError(str(getattr(exc, "reason", None) or exc) or exc.__class__.__name__) from None
    return status, answer_headers, raw


def exchange(url, method="GET", body=None, api_key=None, accept="application/json", timeout=10.0,
             validate_certs=True, use_proxy=False, max_body_bytes=DEFAULT_MAX_BODY_BYTES):
    """(status, body text) of one request to ``url``; ``body`` (JSON-able) is sent as JSON."""
    answer = request(url, method=method, body=body, api_key=api_key, accept=accept, timeout=timeout,
                     validate_certs=validate_certs, use_proxy=use_proxy, max_body_bytes=max_body_bytes)
    return answer.status, answer.text
