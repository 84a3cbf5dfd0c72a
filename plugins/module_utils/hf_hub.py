# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Hugging Face Hub's HTTP protocol, as far as the collection speaks it: the endpoint (HF_ENDPOINT), the token
header, the repository and revision names, the revision's file list with sizes and hashes, and the Hub's refusals.

What the pinned client (huggingface_hub 2.4.0, `hf download`) asks, this asks the same way: the model info at a
revision (`/api/models/{repo}/revision/{rev}`: the commit it resolves to, whether the repository is gated), the
recursive tree at that commit (`/api/models/{repo}/tree/{commit}`, paginated by `Link: <...>; rel="next"`) and, to
find out whether the token may download a gated repository's files, a HEAD of one file's resolve URL. A refusal is
read as the client reads it (`X-Error-Code`: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo; a 401 without
one on a repository URL is "not found" unless the message is the Hub's invalid-token one). The token goes only into
the Authorization header of requests to the endpoint's own origin and never into a result or a message.
"""

from __future__ import annotations

import json
import re

from urllib.parse import quote, urljoin, urlsplit

from ansible_collections.llmops.serving.plugins.module_utils import http_exchange
from ansible_collections.llmops.serving.plugins.module_utils import redact as redaction

DEFAULT_ENDPOINT = "https://huggingface.co"
# huggingface_hub's repo id rule (utils/_validators.py: validate_repo_id): namespace/name of [\w.-], no "--" or "..".
REPO_ID_RE = re.compile(r"^(?:[A-Za-z0-9_.-]{1,96}/)?[A-Za-z0-9_.-]{1,96}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
INVALID_TOKEN_MESSAGE = "Invalid credentials in Authorization header"
MAX_TREE_PAGES = 1000
MAX_REDIRECTS = 3
MAX_API_BODY_BYTES = 64 * 1024 * 1024
TREE_FIELDS = ("path", "size", "oid")

# What a refusal means, for the caller's message and the fix it suggests.
REPO_NOT_FOUND = "repo_not_found"
REVISION_NOT_FOUND = "revision_not_found"
ENTRY_NOT_FOUND = "entry_not_found"
GATED = "gated"
INVALID_TOKEN = "invalid_token"
UNREACHABLE = "unreachable"
HTTP = "http"
PROTOCOL = "protocol"


class HubError(Exception):
    """The hub said no, or did not answer as the hub does: ``kind`` (one of the constants above), ``status``."""

    def __init__(self, kind, message, status=None):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.message = message


def redact(text, token):
    """``text`` without the token, in any form a server may echo what it was sent in (URL-encoded, JSON-escaped, split
    across lines: redact.redact_text), nor any other secret redact recognises."""
    if not text:
        return text
    return redaction.redact_text(text, secrets=(token,) if token else ())


def shortened(text, token, limit):
    """``text`` for a message: masked as redact() masks it first, then cut to ``limit`` characters (redact.shortened:
    cut first, a part of the token would survive the masking)."""
    return redaction.shortened(text, limit, secrets=(token,) if token else ())


def shown(value, token, limit=200):
    """``value`` (JSON) for a message: the token masked first, then cut to ``limit`` characters."""
    return shortened(json.dumps(value), token, limit)


def repo_id_error(repo_id):
    """Why ``repo_id`` is not a repository ID the Hub accepts, or None."""
    if not isinstance(repo_id, str) or not REPO_ID_RE.match(repo_id):
        return "%r is not a Hugging Face repository ID (namespace/name of letters, digits, '-', '_', '.')" % (repo_id,)
    if "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        return "%r is not a Hugging Face repository ID ('--', '..' and a trailing '.git' are not allowed)" % repo_id
    return None


def endpoint_error(endpoint):
    """Why ``endpoint`` is not a usable hub endpoint, or None."""
    parts = urlsplit(endpoint or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "%r is not an http(s) URL" % (endpoint,)
    if parts.username or parts.password or parts.query or parts.fragment:
        return "the endpoint must not carry credentials, a query or a fragment"
    return None


def _origin(url):
    parts = urlsplit(url)
    return (parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme))


class Hub:
    """One hub endpoint with its token and TLS settings."""

    def __init__(self, endpoint=DEFAULT_ENDPOINT, token=None, timeout=30.0, validate_certs=True, ca_path=None):
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.token = token or None
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.ca_path = ca_path

    def api_url(self, repo_id, *parts):
        return "%s/api/models/%s/%s" % (self.endpoint, repo_id, "/".join(quote(part, safe="") for part in parts))

    def resolve_url(self, repo_id, commit, path):
        return "%s/%s/resolve/%s/%s" % (self.endpoint, repo_id, commit, quote(path))

    def _call(self, url, method="GET"):
        """One request, following redirects that stay on the endpoint's origin (the Hub redirects renamed
        repositories); the token is only ever sent there."""
        for _hop in range(MAX_REDIRECTS + 1):
            same_origin = _origin(url) == _origin(self.endpoint)
            try:
                answer = http_exchange.request(
                    url, method=method, api_key=self.token if same_origin else None, timeout=self.timeout,
                    validate_certs=self.validate_certs, use_proxy=True, max_body_bytes=MAX_API_BODY_BYTES,
                    ca_path=self.ca_path, use_netrc=False)
            except http_exchange.ExchangeError as exc:
                raise HubError(UNREACHABLE, "%s %s: %s" % (method, url, shortened(exc.reason, self.token, 500))) from None
            location = answer.headers.get("location")
            if answer.status in (301, 302, 307, 308) and location and method != "HEAD":
                target = urljoin(url, location)
                if _origin(target) != _origin(self.endpoint):
                    raise HubError(PROTOCOL, "%s redirects to another origin (%s): not followed" % (
                        url, shortened(target, self.token, 500)))
                url = target
                continue
            return url, answer
        raise HubError(PROTOCOL, "%s: more than %d redirects" % (url, MAX_REDIRECTS))

    def refusal(self, url, answer, repo_id, revision=None):
        """The HubError for an answer that is not 2xx/3xx, read as huggingface_hub reads it."""
        code = answer.headers.get("x-error-code")
        server = answer.headers.get("x-error-message") or _body_error(answer.text)
        server = shortened(server, self.token, 500) if server else server
        said = " (the hub said: %s)" % server if server else ""
        if code == "RevisionNotFound":
            return HubError(REVISION_NOT_FOUND, "revision %r of %s was not found on %s%s" % (
                revision, repo_id, self.endpoint, said), answer.status)
        if code == "EntryNotFound":
            return HubError(ENTRY_NOT_FOUND, "%s: no such file%s" % (url, said), answer.status)
        if code == "GatedRepo":
            fix = ("give a token (sglang_hf_token / HF_TOKEN) of an account that was granted access" if not self.token
                   else "the token's account has not been granted access: ask for it on the model's page")
            return HubError(GATED, "%s is gated: %s%s" % (repo_id, fix, said), answer.status)
        if answer.status == 401 and server and INVALID_TOKEN_MESSAGE.lower() in server.lower():
            return HubError(INVALID_TOKEN, "the hub %s refused the token%s" % (self.endpoint, said), answer.status)
        if code == "RepoNotFound" or answer.status in (401, 404):
            hint = ("if it is private or gated, give a token with access" if not self.token
                    else "or the token's account cannot see it")
            return HubError(REPO_NOT_FOUND, "repository %s was not found on %s (%s)%s" % (
                repo_id, self.endpoint, hint, said), answer.status)
        return HubError(HTTP, "%s answered %s%s" % (url, answer.status, said), answer.status)

    def _json(self, url, repo_id, revision=None):
        final_url, answer = self._call(url)
        if not 200 <= answer.status < 300:
            raise self.refusal(final_url, answer, repo_id, revision)
        try:
            return answer, json.loads(answer.text)
        except ValueError:
            raise HubError(PROTOCOL, "%s: the answer is not JSON (is %s a Hugging Face Hub endpoint?)" % (
                final_url, self.endpoint)) from None

    def revision(self, repo_id, revision):
        """{"commit", "gated", "private"} of a revision: the commit it resolves to."""
        _answer, info = self._json(self.api_url(repo_id, "revision", revision), repo_id, revision)
        commit = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(commit, str) or not COMMIT_RE.match(commit):
            raise HubError(PROTOCOL, "the hub's info for %s at %r names no commit (sha: %s)" % (
                repo_id, revision, shown(commit if isinstance(info, dict) else info, self.token)))
        gated = info.get("gated", False)
        return {"commit": commit, "gated": gated if gated in ("auto", "manual") else False,
                "private": info.get("private") is True}

    def tree(self, repo_id, commit):
        """Every entry of the commit's recursive tree listing, following its pages (raw dicts)."""
        url = self.api_url(repo_id, "tree", commit) + "?recursive=true&expand=false"
        entries = []
        for _page in range(MAX_TREE_PAGES):
            answer, page = self._json(url, repo_id, commit)
            if not isinstance(page, list):
                raise HubError(PROTOCOL, "the tree listing of %s at %s is not a list" % (repo_id, commit))
            entries.extend(page)
            url = _next_link(answer.headers.get("link"), url)
            if url is None:
                return entries
            if _origin(url) != _origin(self.endpoint):
                raise HubError(PROTOCOL, "the tree listing's next page is on another origin: %s" % (
                    shortened(url, self.token, 500)))
        raise HubError(PROTOCOL, "the tree listing of %s has more than %d pages" % (repo_id, MAX_TREE_PAGES))

    def check_download_access(self, repo_id, commit, path):
        """Raise the hub's refusal when this token may not download ``path`` (a gated repository without access).
        A redirect is an answer: the file is served (from elsewhere)."""
        url = self.resolve_url(repo_id, commit, path)
        final_url, answer = self._call(url, method="HEAD")
        if answer.status >= 400:
            raise self.refusal(final_url, answer, repo_id, commit)


def _body_error(text):
    try:
        value = json.loads(text)
    except ValueError:
        return None
    error = value.get("error") if isinstance(value, dict) else None
    return error if isinstance(error, str) and error else None


def _next_link(header, current):
    """The rel="next" URL of a Link header, absolute, or None."""
    for part in (header or "").split(","):
        match = re.match(r'\s*<([^>]*)>\s*;(.*)$', part)
        if match and re.search(r'rel="?next"?', match.group(2)):
            return urljoin(current, match.group(1))
    return None


def file_entries(entries, token=None):
    """The files of a tree listing: ({path: {"size", "blob_id", "sha256"}}, [why each unusable entry is left out]).

    A file's hash is its LFS sha256 when it is stored with LFS, else its git blob id (sha1 over "blob <size>\\0" and
    the bytes). Entries that are not files are skipped; malformed ones are named, and so is a file whose path carries
    ``token`` (a hub that echoes it there would have it in every list of files a result shows)."""
    files = {}
    refused = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") not in ("file", "directory"):
            refused.append("an entry that is neither a file nor a directory: %s" % shown(entry, token))
            continue
        if entry["type"] != "file":
            continue
        path, size, oid = (entry.get(field) for field in TREE_FIELDS)
        lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else None
        sha256 = lfs.get("oid") if lfs else None
        if not isinstance(path, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0 or \
                not isinstance(oid, str) or not re.match(r"^[0-9a-f]{40}$", oid) or \
                (lfs is not None and not (isinstance(sha256, str) and SHA256_RE.match(sha256))):
            refused.append("a malformed file entry: %s" % shown(entry, token))
            continue
        if token and redaction.mask_secrets(path, (token,)) != path:
            refused.append("a file entry whose path carries the token: %s" % shown(entry, token))
            continue
        files[path] = {"size": size, "blob_id": oid, "sha256": sha256}
    return files, refused
