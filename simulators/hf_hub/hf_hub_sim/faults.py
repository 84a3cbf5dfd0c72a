# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fault switches of one server, from a JSON control file that is read again whenever it changes, so that a test can
switch a fault on a running server:

{"cut_after": {"model-00002-of-00004.safetensors": 300000},
 "cut_count": {"model-00002-of-00004.safetensors": 1},
 "damage": {"model-00003-of-00004.safetensors": 4096},
 "bytes_per_second": 0,
 "latency_ms": 0}

cut_after: a transfer of that file (by its path in the repository) stops after that many bytes of its body: the
    server closes the connection in the middle of the body it announced, as a dropped connection does. A transfer with
    fewer bytes to send (a resume with Range near the end) is served whole.
cut_count: only the first that many transfers of the file are cut (absent: every one).
damage: the byte at that offset is served inverted; everything the hub says about the file (size, hashes) stays true
    of the undamaged file.
bytes_per_second: every file body is sent at most this fast (0: unlimited; else at least 4096).
latency_ms: every answer waits this long first (at most 10000).
"""
from __future__ import annotations

import json
import os
import sys
import threading

MIN_BYTES_PER_SECOND = 4096
MAX_LATENCY_MS = 10000
NO_FAULTS = {"cut_after": {}, "cut_count": {}, "damage": {}, "bytes_per_second": 0, "latency_ms": 0}


class FaultError(ValueError):
    pass


def _is_count(value, minimum):
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def validate(value):
    """The fault switches in ``value`` with their defaults; FaultError names what is wrong."""
    if not isinstance(value, dict):
        raise FaultError("the fault file must hold a JSON object")
    unknown = sorted(set(value) - set(NO_FAULTS))
    if unknown:
        raise FaultError("unknown fault switches: %s" % ", ".join(unknown))
    faults = dict(NO_FAULTS, **value)
    for key, minimum in (("cut_after", 1), ("cut_count", 1), ("damage", 0)):
        table = faults[key]
        if not isinstance(table, dict) or not all(_is_count(offset, minimum) for offset in table.values()):
            raise FaultError("%s maps a file's path to a byte offset >= %d" % (key, minimum))
    rate = faults["bytes_per_second"]
    if not isinstance(rate, int) or isinstance(rate, bool) or (rate != 0 and rate < MIN_BYTES_PER_SECOND):
        raise FaultError("bytes_per_second is 0 (unlimited) or at least %d" % MIN_BYTES_PER_SECOND)
    latency = faults["latency_ms"]
    if not isinstance(latency, int) or isinstance(latency, bool) or not 0 <= latency <= MAX_LATENCY_MS:
        raise FaultError("latency_ms is between 0 and %d" % MAX_LATENCY_MS)
    return faults


class Faults:
    """The switches in force: the control file's, read again when its modification time or size changes; a file that
    does not validate leaves the previous switches in force and says why on stderr."""

    def __init__(self, path=None, initial=None):
        self.path = path
        self._lock = threading.Lock()
        self._current = validate(initial or {})
        self._seen = None
        self._cuts_made = {}

    def current(self):
        if not self.path:
            return self._current
        with self._lock:
            try:
                stat = os.stat(self.path)
                seen = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            except FileNotFoundError:
                seen = None
            if seen != self._seen:
                self._seen = seen
                self._current = self._load(seen)
                self._cuts_made = {}
            return self._current

    def take_cut(self, path):
        """Whether this transfer of ``path`` is to be cut (counts it against cut_count)."""
        faults = self.current()
        if path not in faults["cut_after"]:
            return False
        with self._lock:
            made = self._cuts_made.get(path, 0)
            limit = faults["cut_count"].get(path)
            if limit is not None and made >= limit:
                return False
            self._cuts_made[path] = made + 1
            return True

    def _load(self, seen):
        if seen is None:
            return validate({})
        try:
            with open(self.path, encoding="utf-8") as handle:
                return validate(json.load(handle))
        except (OSError, ValueError) as error:
            sys.stderr.write("hf-hub-sim: ignoring the fault file %s: %s\n" % (self.path, error))
            return self._current
