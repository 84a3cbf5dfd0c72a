# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's log line format: `[%Y-%m-%d %H:%M:%S{.ms}{ TPn}] message`, no level name.

SGLang logs through the `logging` module to stderr; uvicorn's access log goes to stdout with a level prefix.
Every line is written with one os.write so lines from several processes sharing the file never interleave mid-line.
"""
from __future__ import annotations

import logging
import os
import threading
import time

# Re-entrant: signal handlers log from the main thread, possibly while it is inside a write.
_write_lock = threading.RLock()


def _timestamp(now: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes"):
        stamp += ".%03d" % int((now % 1) * 1000)
    return stamp


def rank_tag(tp_rank, tp_size: int) -> str:
    """The ` TPn` part of the prefix: only scheduler processes of a tp_size > 1 run carry it."""
    if tp_rank is None or tp_size <= 1:
        return ""
    return " TP%d" % tp_rank


def format_line(message: str, tag: str = "", now=None) -> str:
    return "[%s%s] %s" % (_timestamp(time.time() if now is None else now), tag, message)


def _emit(fd: int, text: str) -> None:
    data = (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace")
    with _write_lock:
        try:
            while data:
                written = os.write(fd, data)
                data = data[written:]
        except OSError:
            # The log's reader went away (closed pipe); a server keeps serving without its log, as SGLang would.
            pass


def log(message: str, tag: str = "") -> None:
    """An SGLang logger line (stderr)."""
    _emit(2, format_line(message, tag))


def log_uvicorn(message: str) -> None:
    """A uvicorn server line as SGLang configures it: `[time] INFO:     message` (stderr)."""
    _emit(2, format_line("INFO:     " + message))


def log_access(client: str, request_line: str, status: int, phrase: str) -> None:
    """A uvicorn access line (stdout): `[time] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK`."""
    _emit(1, format_line('INFO:     %s - "%s" %d %s' % (client, request_line, status, phrase)))


class SGLangLogHandler(logging.Handler):
    """Route a `logging` logger to SGLang's line format (SGLang's basicConfig: `[%(asctime)s] %(message)s`)."""

    def emit(self, record):
        try:
            log(record.getMessage())
        except Exception:  # pylint: disable=broad-except
            self.handleError(record)


def route_logger(name: str, level_name: str) -> None:
    """Send `name`'s records at `level_name` (SGLang's --log-level) and above to stderr in SGLang's format."""
    logger = logging.getLogger(name)
    logger.setLevel(getattr(logging, level_name.upper()))
    logger.propagate = False
    if not any(isinstance(handler, SGLangLogHandler) for handler in logger.handlers):
        logger.addHandler(SGLangLogHandler())


def emit_raw(line: str) -> None:
    """A line written as is to stderr (torch's c10 log lines have their own prefix)."""
    _emit(2, line)
