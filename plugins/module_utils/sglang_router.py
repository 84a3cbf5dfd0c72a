# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What SGLang's router (``smg``, the Shepherd Model Gateway, and its predecessor sglang-router 0.3.2) says about its
workers, as pure functions.

The sglang_router_workers module registers and checks the router's workers through ``GET/POST /workers`` and
``DELETE /workers/{id}``; this module checks the worker URLs it is given (they also end up in a systemd unit, so a line
break is an attack, not a typo), parses the router's answers and compares the registered set with the expected one.
The router echoes a worker URL exactly as it was given, so every comparison goes through normalize_worker_url().
"""

from __future__ import annotations

import ipaddress
import json
import re

from ansible_collections.llmops.serving.plugins.module_utils import redact

MAX_URL_CHARS = 2048
SCHEMES = ("http", "https")

_SCHEME_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_DNS_LABEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_PORT_RE = re.compile(r"^[1-9][0-9]{0,4}$")
_NUMERIC_HOST_RE = re.compile(r"^[0-9.]+$")


def _host_error(host):
    """None when ``host`` is a DNS name or an IPv4 address, else why not."""
    if not host:
        return "has no host"
    if ":" in host:
        return "has an IPv6 address without brackets (write http://[addr]:port)"
    if _NUMERIC_HOST_RE.match(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return "has a host that is not a valid IPv4 address"
        return None
    if len(host) > 253:
        return "has a host name longer than 253 characters"
    labels = host.split(".")
    if not all(_DNS_LABEL_RE.match(label) for label in labels):
        return "has a host that is not a DNS name, an IPv4 address or a bracketed IPv6 address"
    if labels[-1].isdigit():
        return "has a host name whose last label is a number"
    return None


def worker_url_error(url):
    """None when ``url`` is acceptable as a worker URL, else a short message (which never repeats the URL).

    Accepted: ``http``/``https``, a DNS name, an IPv4 address or a bracketed IPv6 address, an explicit port 1..65535, and
    an empty path or ``/``. Refused: userinfo, a query, a fragment, whitespace, control and non-ASCII characters, and
    anything longer than MAX_URL_CHARS.
    """
    if not isinstance(url, str):
        return "is not a string"
    if not url:
        return "is empty"
    if len(url) > MAX_URL_CHARS:
        return "is longer than %d characters" % MAX_URL_CHARS
    for char in url:
        if char.isspace():
            return "contains whitespace (%s)" % ascii(char)
        if ord(char) < 32 or ord(char) == 127:
            return "contains a control character (%s)" % ascii(char)
        if ord(char) > 127:
            return "contains a non-ASCII character (write an IDN host in its xn-- form)"
    match = _SCHEME_RE.match(url)
    if not match:
        return "is not an absolute URL (scheme://host:port)"
    if match.group("scheme").lower() not in SCHEMES:
        return "has scheme %s, not http or https" % match.group("scheme")
    rest = match.group("rest")
    if "#" in rest:
        return "has a fragment"
    if "?" in rest:
        return "has a query"
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        return "has user information (user:password@)"
    if not authority:
        return "has no host"
    if path:
        return "has a path (only an empty path or / is accepted)"
    if authority.startswith("["):
        address, bracket, after = authority[1:].partition("]")
        if not bracket:
            return "has an IPv6 address without its closing bracket"
        if "%" in address:
            return "has an IPv6 zone index"
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return "has a bracketed host that is not an IPv6 address"
        if not after.startswith(":"):
            return "has no port (an explicit port is required)"
        port = after[1:]
    else:
        host, colon, port = authority.rpartition(":")
        if not colon:
            return "has no port (an explicit port is required)"
        error = _host_error(host)
        if error:
            return error
    if not port:
        return "has no port (an explicit port is required)"
    if not _PORT_RE.match(port) or int(port) > 65535:
        return "has port %s, not a number 1..65535 without leading zeros" % port[:10]
    return None


def normalize_worker_url(url):
    """``url`` with its scheme and host in lower case and without a trailing ``/``: the form every comparison uses."""
    match = _SCHEME_RE.match(url)
    if not match:
        return url.rstrip("/")
    authority, slash, path = match.group("rest").partition("/")
    return ("%s://%s%s%s" % (match.group("scheme").lower(), authority.lower(), slash, path)).rstrip("/")


def _loads(text, what, secrets=()):
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ValueError("%s is not text but %s" % (what, type(text).__name__))
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError("%s is not JSON (%s): %r" % (what, exc, redact.shortened(text, 200, secrets=secrets)))
    if not isinstance(data, dict):
        raise ValueError("%s is not a JSON object but %s" % (what, type(data).__name__))
    return data


def parse_workers(text, secrets=()):
    """The body of ``GET /workers``: a list of ``{id, url, is_healthy, model_id, worker_type, load, status}``.

    ``status`` is smg's (``pending``, ``ready``, ``not_ready``, ``failed``, ``draining``); sglang-router 0.3.2 has no
    such field (None). A worker smg is draining stays listed, unhealthy, until smg removes it.

    Raises ValueError naming what is wrong: not JSON, no ``workers`` list, an entry without a string ``url`` or ``id``,
    or an ``is_healthy`` that is not a boolean. What the message quotes of the body is masked (redact, with ``secrets``:
    the key the request carried) before it is shortened.
    """
    data = _loads(text, "the worker list", secrets)
    if "workers" not in data:
        raise ValueError("the worker list has no 'workers' key (keys: %s)" % ", ".join(sorted(map(str, data))[:10]))
    entries = data["workers"]
    if not isinstance(entries, list):
        raise ValueError("the worker list's 'workers' is a %s, not a list" % type(entries).__name__)
    workers = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError("workers[%d] is a %s, not an object" % (index, type(entry).__name__))
        for key in ("id", "url"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ValueError("workers[%d] has no string '%s'" % (index, key))
        if not isinstance(entry.get("is_healthy"), bool):
            raise ValueError("workers[%d] (%s) has an 'is_healthy' that is not true or false: %r" % (
                index, redact.shortened(entry["url"], 200, secrets=secrets), entry.get("is_healthy")))
        workers.append({
            "id": entry["id"],
            "url": entry["url"],
            "is_healthy": entry["is_healthy"],
            "model_id": entry.get("model_id"),
            "worker_type": entry.get("worker_type"),
            "load": entry.get("load") if isinstance(entry.get("load"), int) and not isinstance(entry.get("load"), bool) else None,
            "status": entry.get("status") if isinstance(entry.get("status"), str) else None,
        })
    return workers


def drains(workers):
    """Whether the router drains a worker it is asked to remove (smg: its entries carry a ``status``)."""
    return any(worker["status"] is not None for worker in workers)


def parse_readiness(text):
    """The body of ``GET /readiness``: ``{status, healthy_workers, total_workers, reason}``.

    The counts are None in the 503 answer (``{"status":"not ready","reason":...}``), reason is None in the 200 one.
    Raises ValueError when the body is not such an object.
    """
    data = _loads(text, "the readiness answer")
    status = data.get("status")
    if not isinstance(status, str):
        raise ValueError("the readiness answer has no string 'status'")
    result = {"status": status, "healthy_workers": None, "total_workers": None, "reason": None}
    for key in ("healthy_workers", "total_workers"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError("the readiness answer's '%s' is not a count: %r" % (key, value))
        result[key] = value
    reason = data.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("the readiness answer's 'reason' is not a string")
    result["reason"] = reason
    return result


def compare_workers(expected_urls, workers):
    """``{missing, unexpected, unhealthy, duplicates}`` of the registered ``workers`` (parse_workers) against
    ``expected_urls``; sorted normalized URLs. ``unhealthy`` covers every registered URL with an unhealthy entry,
    ``duplicates`` every URL registered more than once."""
    expected = set(normalize_worker_url(url) for url in expected_urls)
    counts = {}
    unhealthy = set()
    for worker in workers:
        url = normalize_worker_url(worker["url"])
        counts[url] = counts.get(url, 0) + 1
        if not worker["is_healthy"]:
            unhealthy.add(url)
    return {
        "missing": sorted(expected - set(counts)),
        "unexpected": sorted(set(counts) - expected),
        "unhealthy": sorted(unhealthy),
        "duplicates": sorted(url for url, count in counts.items() if count > 1),
    }


def find_worker_ids(workers, url):
    """The ids under which ``url`` is registered in ``workers`` (parse_workers), in the router's order."""
    wanted = normalize_worker_url(url)
    return [worker["id"] for worker in workers if normalize_worker_url(worker["url"]) == wanted]
