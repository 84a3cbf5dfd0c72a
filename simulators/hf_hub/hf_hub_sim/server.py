# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTTP side: the hub listener (repository info, tree listing, resolve) and the CDN listener (LFS objects), as
`hf download` of huggingface_hub 2.4.0 uses them (huggingface_hub/_snapshot_download.py, file_download.py, hf_api.py,
utils/_http.py:hf_raise_for_status).

The refusals are the Hub's (sources in README.md): an anonymous request for a repository that does not exist or is
private gets 401 "Invalid username or password." (no X-Error-Code); with a valid token, 404 X-Error-Code RepoNotFound;
an unknown token 401 "Invalid credentials in Authorization header"; an unknown revision 404 RevisionNotFound
("Invalid rev id: <rev>"); an unknown file 404 EntryNotFound; a gated repository's files 401 GatedRepo anonymously
and 403 GatedRepo for a token without access (its info and tree stay readable, as on the Hub). LFS files are
redirected (302) to the CDN listener, another origin, so the client drops the token there as it does for the Hub's
CDN; no response carries X-Xet-Hash, so the client downloads over plain HTTP.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

CHUNK = 64 * 1024
# Sources of the messages: README.md, "What it refuses".
MESSAGE_NO_SUCH_REPO_ANONYMOUS = "Invalid username or password."
MESSAGE_INVALID_TOKEN = "Invalid credentials in Authorization header"
MESSAGE_GATED_ANONYMOUS = ("Access to model %s is restricted. You must have access to it and be authenticated to "
                           "access it. Please log in.")
MESSAGE_GATED_NO_ACCESS = ("Access to model %s is restricted and you are not in the authorized list. Visit "
                           "https://huggingface.co/%s to ask for access.")
MESSAGE_INVALID_REVISION = "Invalid rev id: %s"
TRUE_VALUES = ("true", "True", "1")


def header_safe(text):
    """A header value: latin-1 without control characters (anything else escaped)."""
    escaped = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return escaped.encode("latin-1", "backslashreplace").decode("latin-1")


def git_tree_ids(commit):
    """git's object id of every directory of a commit ("" is the root): tree objects of mode/name/id entries, names
    sorted as git sorts them (a directory as name + "/")."""
    children = {}
    for path, repo_file in commit.files.items():
        parent, _slash, name = path.rpartition("/")
        children.setdefault(parent, []).append((name, "100644", bytes.fromhex(repo_file.blob_id), False))
    for directory in commit.directories():
        parent, _slash, name = directory.rpartition("/")
        children.setdefault(parent, [])
        children.setdefault(directory, [])
    ids = {}
    for directory in sorted(children, key=lambda d: -d.count("/") if d else 1):
        entries = list(children[directory])
        for other in children:
            if other and other.rpartition("/")[0] == directory and other != directory:
                entries.append((other.rpartition("/")[2], "40000", bytes.fromhex(ids[other]), True))
        entries.sort(key=lambda entry: entry[0] + ("/" if entry[3] else ""))
        body = b"".join(b"%s %s\0%s" % (mode.encode(), name.encode(), oid) for name, mode, oid, _is_dir in entries)
        ids[directory] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()  # nosec - git's object format
    return ids


class RequestLog:
    """JSON lines, one per request: what a test asserts on (never a token, only whether one was sent)."""

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()

    def write(self, entry):
        if not self.path:
            return
        with self._lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")


class State:
    """What both listeners share."""

    def __init__(self, hub, faults, request_log, tree_page_size=1000, scheme="http"):
        self.hub = hub
        self.faults = faults
        self.request_log = request_log
        self.tree_page_size = tree_page_size
        self.scheme = scheme
        self.cdn_port = None
        self.request_ids = itertools.count(1)
        self.tree_ids = {}
        self._tree_lock = threading.Lock()

    def tree_id(self, commit, directory):
        with self._tree_lock:
            if commit.sha not in self.tree_ids:
                self.tree_ids[commit.sha] = git_tree_ids(commit)
            return self.tree_ids[commit.sha][directory]


class Refusal(Exception):
    """An answer that says no: status, X-Error-Code, message (header and body) and more headers."""

    def __init__(self, status, code=None, message=None, headers=None):
        super().__init__(message or code or str(status))
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hf-hub-sim/0.1"
    sys_version = ""
    listener = "hub"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    @property
    def state(self):
        return self.server.state

    def do_GET(self):  # pylint: disable=invalid-name
        self._dispatch("GET")

    def do_HEAD(self):  # pylint: disable=invalid-name
        self._dispatch("HEAD")

    # The last byte of each answer is held back until the request is logged, so that a client holding the whole
    # answer finds its line in the request log (tests read the log as soon as the client is done).
    _holding = False
    _held = b""
    _logged = False

    def _dispatch(self, method):
        self._entry = {"listener": self.listener, "method": method, "path": urlsplit(self.path).path,
                       "range": self.headers.get("Range"),
                       "auth": "bearer" if self.headers.get("Authorization") else "none",
                       "client": self.client_address[0]}
        self._holding, self._held, self._logged = True, b"", False
        faults = self.state.faults.current()
        if faults["latency_ms"]:
            time.sleep(faults["latency_ms"] / 1000.0)
        try:
            self.route(method, faults)
        except Refusal as refusal:
            self._refuse(refusal)
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-answer.
            self._entry["aborted"] = True
            self.close_connection = True
        self._finish()

    def _send(self, data):
        """Write ``data`` to the client, all but the last byte of the answer so far."""
        if not data:
            return
        if not self._holding:
            self.wfile.write(data)
            return
        self.wfile.write(self._held + data[:-1])
        self._held = data[-1:]

    def flush_headers(self):
        # BaseHTTPRequestHandler.end_headers sends the header block here: through _send, so that an answer without a
        # body (HEAD, 302, 416) is held back too.
        if getattr(self, "_headers_buffer", None):
            self._send(b"".join(self._headers_buffer))
            self._headers_buffer = []

    def _finish(self):
        """Log the request (once), then send the byte held back."""
        if not self._logged:
            self._logged = True
            self.state.request_log.write(self._entry)
        held, self._held, self._holding = self._held, b"", False
        try:
            if held:
                self.wfile.write(held)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- answers ---------------------------------------------------------------------------------------------------

    def _start(self, status, headers):
        self._entry["status"] = status
        self.send_response(status)
        self.send_header("X-Request-Id", "hf-hub-sim-%d" % next(self.state.request_ids))
        for name, value in headers.items():
            self.send_header(name, header_safe(str(value)))
        self.end_headers()

    def _json(self, status, value, headers=None, method="GET"):
        body = json.dumps(value).encode()
        self._start(status, dict({"Content-Type": "application/json; charset=utf-8", "Content-Length": len(body)},
                                 **(headers or {})))
        if method != "HEAD":
            self._send(body)

    def _refuse(self, refusal):
        headers = dict(refusal.headers)
        if refusal.code:
            headers["X-Error-Code"] = refusal.code
        if refusal.message:
            headers["X-Error-Message"] = refusal.message
        self._json(refusal.status, {"error": refusal.message} if refusal.message else {}, headers,
                   self._entry["method"])

    # -- the hub's routes ------------------------------------------------------------------------------------------

    def route(self, method, faults):
        parts = [unquote(part) for part in urlsplit(self.path).path.split("/")[1:]]
        query = parse_qs(urlsplit(self.path).query)
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            rest = parts[4:]
            if not rest and method == "GET":
                return self.model_info(repo_id, "main", query)
            if len(rest) == 2 and rest[0] == "revision" and method == "GET":
                return self.model_info(repo_id, rest[1], query)
            if len(rest) >= 2 and rest[0] == "tree" and method == "GET":
                return self.tree(repo_id, rest[1], "/".join(rest[2:]), query)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(method, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), faults)
        raise Refusal(404, message="not part of the hf-hub-sim stand-in: %s %s" % (method, urlsplit(self.path).path))

    def _access(self):
        """(anonymous, repositories the token may read beyond the public ones); an unknown token is refused."""
        authorization = self.headers.get("Authorization")
        if not authorization:
            return True, ()
        scheme, _space, token = authorization.partition(" ")
        known, access = self.state.hub.token_access(token.strip()) if scheme.lower() == "bearer" else (False, ())
        if not known:
            raise Refusal(401, message=MESSAGE_INVALID_TOKEN)
        return False, access

    def _repo(self, repo_id, download):
        anonymous, access = self._access()
        repo = self.state.hub.repos.get(repo_id)
        if repo is None or (repo.private and repo_id not in access):
            if anonymous:
                raise Refusal(401, message=MESSAGE_NO_SUCH_REPO_ANONYMOUS)
            raise Refusal(404, code="RepoNotFound")
        if download and repo.gated and repo_id not in access:
            if anonymous:
                raise Refusal(401, code="GatedRepo", message=MESSAGE_GATED_ANONYMOUS % repo_id)
            raise Refusal(403, code="GatedRepo", message=MESSAGE_GATED_NO_ACCESS % (repo_id, repo_id))
        return repo

    @staticmethod
    def _commit(repo, revision):
        commit = repo.resolve(revision)
        if commit is None:
            raise Refusal(404, code="RevisionNotFound", message=MESSAGE_INVALID_REVISION % revision)
        return commit

    def model_info(self, repo_id, revision, query):
        repo = self._repo(repo_id, download=False)
        commit = self._commit(repo, revision)
        blobs = query.get("blobs", [""])[0] in TRUE_VALUES
        self._json(200, {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],  # nosec - an id, not a security hash
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0],
            "sha": commit.sha,
            "lastModified": repo.last_modified,
            "createdAt": repo.last_modified,
            "private": repo.private,
            "disabled": False,
            "gated": repo.gated,
            "tags": ["transformers", "safetensors", "standin"],
            "library_name": "transformers",
            "siblings": [repo_file.sibling(blobs) for _path, repo_file in sorted(commit.files.items())],
            "usedStorage": sum(repo_file.size for repo_file in commit.files.values()),
        })

    def tree(self, repo_id, revision, path, query):
        repo = self._repo(repo_id, download=False)
        commit = self._commit(repo, revision)
        path = path.strip("/")
        directories = commit.directories()
        if path and path not in directories:
            raise Refusal(404, code="EntryNotFound", headers={"X-Repo-Commit": commit.sha})
        recursive = query.get("recursive", [""])[0] in TRUE_VALUES
        prefix = path + "/" if path else ""

        def wanted(entry_path):
            return entry_path.startswith(prefix) and (recursive or "/" not in entry_path[len(prefix):])

        entries = [{"type": "directory", "oid": self.state.tree_id(commit, d), "path": d}
                   for d in directories if wanted(d)]
        entries += [repo_file.tree_entry() for p, repo_file in commit.files.items() if wanted(p)]
        entries.sort(key=lambda entry: entry["path"])
        start = _decode_cursor(query.get("cursor", [""])[0])
        end = start + self.state.tree_page_size
        headers = {}
        if end < len(entries):
            host = self.headers.get("Host", "%s:%d" % self.server.server_address[:2])
            link = "%s://%s/api/models/%s/tree/%s%s?recursive=%s&expand=false&cursor=%s" % (
                self.state.scheme, host, repo_id, quote(revision, safe=""), quote("/" + path) if path else "",
                "true" if recursive else "false", _encode_cursor(end))
            headers["Link"] = '<%s>; rel="next"' % link
        self._json(200, entries[start:end], headers)

    def resolve(self, method, repo_id, revision, path, faults):
        repo = self._repo(repo_id, download=True)
        commit = self._commit(repo, revision)
        repo_file = commit.files.get(path)
        if repo_file is None:
            raise Refusal(404, code="EntryNotFound", headers={"X-Repo-Commit": commit.sha})
        headers = {"X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes"}
        if repo_file.lfs_sha256:
            host = self.headers.get("Host", self.server.server_address[0])
            hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            location = "%s://%s:%d/lfs/%s?repo=%s&path=%s" % (
                self.state.scheme, hostname, self.state.cdn_port, repo_file.lfs_sha256, quote(repo_id, safe=""),
                quote(path, safe=""))
            headers.update({"Location": location, "ETag": '"%s"' % repo_file.blob_id,
                            "X-Linked-Etag": '"%s"' % repo_file.lfs_sha256, "X-Linked-Size": repo_file.size,
                            "Content-Length": 0})
            self._start(302, headers)
            return
        headers["ETag"] = '"%s"' % repo_file.blob_id
        self.send_file(method, repo_file, headers, faults)

    # -- file bodies, with Range and the faults --------------------------------------------------------------------

    def send_file(self, method, repo_file, headers, faults):
        size = repo_file.size
        self._entry["file"] = repo_file.path
        byte_range = _parse_range(self.headers.get("Range"), size)
        if byte_range == "unsatisfiable":
            raise Refusal(416, headers={"Content-Range": "bytes */%d" % size})
        start, end = byte_range or (0, size - 1)
        headers = dict(headers, **{"Content-Type": "application/octet-stream", "Content-Length": end - start + 1})
        if byte_range:
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, size)
        self._start(206 if byte_range else 200, headers)
        if method == "HEAD" or size == 0:
            return
        stop = end + 1
        cut_after = faults["cut_after"].get(repo_file.path)
        if cut_after is not None and start + cut_after <= end and self.state.faults.take_cut(repo_file.path):
            stop = start + cut_after
        damage = faults["damage"].get(repo_file.path)
        rate = faults["bytes_per_second"]
        sent = 0
        began = time.monotonic()
        with open(repo_file.local_path, "rb") as handle:
            handle.seek(start)
            position = start
            while position < stop:
                chunk = bytearray(handle.read(min(CHUNK if not rate else 16384, stop - position)))
                if not chunk:
                    break
                if damage is not None and position <= damage < position + len(chunk):
                    chunk[damage - position] ^= 0xFF
                self._send(bytes(chunk))
                position += len(chunk)
                sent += len(chunk)
                if rate:
                    ahead = began + sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
        self._entry["bytes"] = sent
        if stop <= end:
            # The dropped connection: the body stops short of its Content-Length and the socket closes.
            self._entry["cut"] = True
            self._finish()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class CdnHandler(Handler):
    """The LFS objects by sha256, as the Hub's CDN serves them after the redirect (no token needed)."""

    listener = "cdn"

    def route(self, method, faults):
        split = urlsplit(self.path)
        match = re.match(r"^/lfs/([0-9a-f]{64})$", split.path)
        repo_file = self.state.hub.lfs_objects.get(match.group(1)) if match else None
        if repo_file is None:
            raise Refusal(404, message="no such object")
        headers = {"ETag": '"%s"' % repo_file.lfs_sha256, "Accept-Ranges": "bytes"}
        self.send_file(method, repo_file, headers, faults)


def _parse_range(value, size):
    """(start, end) of a single "bytes=" range, None to serve the whole file, or "unsatisfiable"."""
    match = re.match(r"^bytes=(\d*)-(\d*)$", (value or "").strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":
        length = int(last)
        return (max(size - length, 0), size - 1) if length and size else "unsatisfiable"
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or start > end:
        return "unsatisfiable"
    return start, end


def _encode_cursor(offset):
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _decode_cursor(cursor):
    if not cursor:
        return 0
    try:
        return max(int(json.loads(base64.urlsafe_b64decode(cursor.encode()))["offset"]), 0)
    except (ValueError, KeyError, TypeError):
        raise Refusal(400, message="invalid cursor") from None


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, state, tls_context=None):
        super().__init__(address, handler)
        self.state = state
        if tls_context is not None:
            self.socket = tls_context.wrap_socket(self.socket, server_side=True)


def serve(state, host, port, cdn_port, ready_file=None, tls_context=None, stop_event=None):
    """Bind both listeners, write the ready file, serve until SIGTERM/KeyboardInterrupt or ``stop_event``."""
    hub_server = Server((host, port), Handler, state, tls_context)
    cdn_server = Server((host, cdn_port), CdnHandler, state, tls_context)
    state.cdn_port = cdn_server.server_address[1]
    threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
               for server in (hub_server, cdn_server)]
    for thread in threads:
        thread.start()
    shown_host = "[%s]" % host if ":" in host else host
    endpoint = {"endpoint": "%s://%s:%d" % (state.scheme, shown_host, hub_server.server_address[1]),
                "cdn": "%s://%s:%d" % (state.scheme, shown_host, state.cdn_port), "pid": os.getpid()}
    if ready_file:
        tmp = ready_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(endpoint, handle)
        os.replace(tmp, ready_file)
    sys.stdout.write("hf-hub-sim: serving %d repositories at %s (LFS objects at %s)\n" % (
        len(state.hub.repos), endpoint["endpoint"], endpoint["cdn"]))
    sys.stdout.flush()
    try:
        while not (stop_event and stop_event.is_set()):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for server in (hub_server, cdn_server):
            server.shutdown()
            server.server_close()
    return endpoint
