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
"""

from __future__ import annotations

import collections
import json

from urllib.error import HTTPError

from ansible.module_utils.urls import open_url

# A /metrics page of a busy SGLang is some 100 KiB and a chat completion a few; more than this is not a server of ours.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


class ExchangeError(Exception):
    """No HTTP answer to use (``reason`` says why)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def _read_bounded(response, max_bytes):
    """The whole body, at most ``max_bytes``; a body that ends before its Content-Length is an error, as read() says.

    read(amt) of http.client returns what arrived when the connection closes early, so the bytes still owed are
    checked (``length`` of the HTTPResponse; an HTTPError hands attribute reads to its response)."""
    chunks = []
    total = 0
    while True:
        chunk = response.read(min(65536, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
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
    (JSON-able) is sent as JSON. ``use_netrc=False`` keeps credentials from ~/.netrc out of the request."""
    headers = {"Accept": accept}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    try:
        response = open_url(url, data=data, headers=headers, method=method, timeout=timeout,
                            validate_certs=validate_certs, use_proxy=use_proxy, follow_redirects="none",
                            ca_path=ca_path, use_netrc=use_netrc)
        status, raw = response.getcode(), _read_bounded(response, max_body_bytes)
        answer_headers = response.headers
    except HTTPError as exc:
        status = exc.code
        answer_headers = exc.headers
        try:
            raw = _read_bounded(exc, max_body_bytes) or b""
        except ExchangeError:
            raise
        except Exception:  # pylint: disable=broad-except
            raw = b""
    except ExchangeError:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        # URLError, a timeout, a reset connection, a body cut short, or open_url's ConnectionError/SSLValidationError.
        raise ExchangeError(str(getattr(exc, "reason", None) or exc) or exc.__class__.__name__) from None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw or "")
    lowered = dict((name.lower(), value) for name, value in (answer_headers.items() if answer_headers else ()))
    return Answer(status, lowered, text)


def exchange(url, method="GET", body=None, api_key=None, accept="application/json", timeout=10.0,
             validate_certs=True, use_proxy=False, max_body_bytes=DEFAULT_MAX_BODY_BYTES):
    """(status, body text) of one request to ``url``; ``body`` (JSON-able) is sent as JSON."""
    answer = request(url, method=method, body=body, api_key=api_key, accept=accept, timeout=timeout,
                     validate_certs=validate_certs, use_proxy=use_proxy, max_body_bytes=max_body_bytes)
    return answer.status, answer.text
