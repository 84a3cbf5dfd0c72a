# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in hub's repositories, read from a directory (the root):

ROOT/hub.json                        {"tokens": {"<token>": {"user": "<name>", "access": ["<ns>/<name>", ...]}}}
ROOT/<ns>/<name>/repo.json           {"private": false, "gated": false | "auto" | "manual",
                                      "refs": {"main": "<40 hex>"}, "tags": {"v1.0": "<40 hex>"},
                                      "last_modified": "2026-04-22T00:00:00.000Z"}
ROOT/<ns>/<name>/commits/<40 hex>/   the files of that commit, as a checkout has them

A token's `access` lets it read those private repositories and download from those gated ones. A file is stored with
Git LFS when a `filter=lfs` line of the commit's .gitattributes matches it (its hash is then the sha256 of its bytes,
its git blob the LFS pointer); the others are git blobs (their hash is git's sha1 of "blob <size>\\0" + bytes).
Every hash is computed from the bytes served, at load.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
LFS_POINTER_VERSION = "https://git-lfs.github.com/spec/v1"
DEFAULT_LAST_MODIFIED = "2026-04-22T00:00:00.000Z"
GATED_VALUES = (False, "auto", "manual")


class HubRootError(Exception):
    """The root does not describe a hub (names the file and why)."""


def git_blob_sha1(data_chunks, size):
    """git's object id of a blob: sha1 over "blob <size>\\0" and the bytes."""
    digest = hashlib.sha1(b"blob %d\0" % size)  # nosec - git's object format, not a security hash
    for chunk in data_chunks:
        digest.update(chunk)
    return digest.hexdigest()


def read_chunks(path, size=1 << 20):
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(size)
            if not chunk:
                return
            yield chunk


def lfs_pointer(sha256, size):
    """The text git stores for an LFS file (git-lfs spec v1)."""
    return "version %s\noid sha256:%s\nsize %d\n" % (LFS_POINTER_VERSION, sha256, size)


def lfs_patterns(gitattributes_text):
    """The patterns of .gitattributes lines that route files through the LFS filter."""
    patterns = []
    for line in gitattributes_text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and "filter=lfs" in fields[1:]:
            patterns.append(fields[0])
    return patterns


def matches_lfs(path, patterns):
    """git's rule, simplified: a pattern without a slash matches the base name at any depth, one with a slash the
    path from the root."""
    for pattern in patterns:
        if "/" in pattern.strip("/"):
            if fnmatch.fnmatchcase(path, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern):
            return True
    return False


class RepoFile:
    """One file of a commit as the hub describes it."""

    def __init__(self, path, local_path, lfs):
        self.path = path
        self.local_path = local_path
        self.size = os.path.getsize(local_path)
        if lfs:
            digest = hashlib.sha256()
            for chunk in read_chunks(local_path):
                digest.update(chunk)
            self.lfs_sha256 = digest.hexdigest()
            pointer = lfs_pointer(self.lfs_sha256, self.size).encode()
            self.pointer_size = len(pointer)
            self.blob_id = git_blob_sha1([pointer], len(pointer))
        else:
            self.lfs_sha256 = None
            self.pointer_size = None
            self.blob_id = git_blob_sha1(read_chunks(local_path), self.size)

    @property
    def etag(self):
        """What the client keeps as the file's ETag: the sha256 for LFS files, the git blob id for the others."""
        return self.lfs_sha256 or self.blob_id

    def tree_entry(self):
        entry = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path}
        if self.lfs_sha256:
            entry["lfs"] = {"oid": self.lfs_sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry

    def sibling(self, blobs):
        sibling = {"rfilename": self.path}
        if blobs:
            sibling.update(size=self.size, blobId=self.blob_id)
            if self.lfs_sha256:
                sibling["lfs"] = {"sha256": self.lfs_sha256, "size": self.size, "pointerSize": self.pointer_size}
        return sibling


class Commit:
    def __init__(self, sha, directory):
        self.sha = sha
        self.files = {}
        gitattributes = os.path.join(directory, ".gitattributes")
        patterns = []
        if os.path.isfile(gitattributes):
            with open(gitattributes, encoding="utf-8") as handle:
                patterns = lfs_patterns(handle.read())
        for current, dirs, names in os.walk(directory):
            dirs.sort()
            for name in sorted(names):
                local_path = os.path.join(current, name)
                if os.path.islink(local_path) or not os.path.isfile(local_path):
                    raise HubRootError("%s: only regular files can be served" % local_path)
                path = os.path.relpath(local_path, directory).replace(os.sep, "/")
                self.files[path] = RepoFile(path, local_path, matches_lfs(path, patterns))

    def directories(self):
        """Every directory of the commit's tree (the tree listing names them too)."""
        found = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                found.add("/".join(parts[:depth]))
        return sorted(found)


class Repo:
    def __init__(self, repo_id, directory):
        self.repo_id = repo_id
        config_path = os.path.join(directory, "repo.json")
        config = _read_json(config_path)
        self.private = config.get("private", False)
        self.gated = config.get("gated", False)
        if not isinstance(self.private, bool) or self.gated not in GATED_VALUES:
            raise HubRootError("%s: private must be true/false and gated false, \"auto\" or \"manual\"" % config_path)
        self.last_modified = config.get("last_modified", DEFAULT_LAST_MODIFIED)
        self.commits = {}
        commits_dir = os.path.join(directory, "commits")
        for sha in sorted(os.listdir(commits_dir)) if os.path.isdir(commits_dir) else ():
            if not COMMIT_RE.match(sha):
                raise HubRootError("%s: commit directories are named by 40 lowercase hex digits"
                                   % os.path.join(commits_dir, sha))
            self.commits[sha] = Commit(sha, os.path.join(commits_dir, sha))
        self.refs = {}
        for kind in ("refs", "tags"):
            names = config.get(kind, {})
            if not isinstance(names, dict):
                raise HubRootError("%s: %s must be an object" % (config_path, kind))
            for name, sha in names.items():
                if sha not in self.commits:
                    raise HubRootError("%s: %s %r names commit %r, which is not under commits/"
                                       % (config_path, kind, name, sha))
                self.refs[name] = sha

    def resolve(self, revision):
        """The commit a revision names (a branch, a tag, a commit or a unique prefix of 7+ hex digits), or None."""
        if revision in self.refs:
            return self.commits[self.refs[revision]]
        if revision in self.commits:
            return self.commits[revision]
        if re.match(r"^[0-9a-f]{7,39}$", revision):
            candidates = [sha for sha in self.commits if sha.startswith(revision)]
            if len(candidates) == 1:
                return self.commits[candidates[0]]
        return None


class Hub:
    """Every repository and token of a root, with the LFS objects by sha256 (what the CDN serves)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        hub_config = _read_json(os.path.join(self.root, "hub.json"))
        tokens = hub_config.get("tokens", {})
        if not isinstance(tokens, dict) or not all(isinstance(v, dict) for v in tokens.values()):
            raise HubRootError("%s: tokens must map each token to {user, access}" % os.path.join(self.root, "hub.json"))
        self.tokens = tokens
        self.repos = {}
        for namespace in sorted(os.listdir(self.root)):
            namespace_dir = os.path.join(self.root, namespace)
            if not os.path.isdir(namespace_dir) or namespace.startswith("."):
                continue
            for name in sorted(os.listdir(namespace_dir)):
                if os.path.isfile(os.path.join(namespace_dir, name, "repo.json")):
                    repo_id = "%s/%s" % (namespace, name)
                    self.repos[repo_id] = Repo(repo_id, os.path.join(namespace_dir, name))
        self.lfs_objects = {}
        for repo in self.repos.values():
            for commit in repo.commits.values():
                for repo_file in commit.files.values():
                    if repo_file.lfs_sha256:
                        self.lfs_objects[repo_file.lfs_sha256] = repo_file

    def token_access(self, token):
        """(known, repos the token may read beyond the public ones); (False, ()) for an unknown token."""
        entry = self.tokens.get(token)
        if entry is None:
            return False, ()
        return True, tuple(entry.get("access", ()))


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        if path.endswith("hub.json"):
            return {}
        raise HubRootError("%s does not exist" % path) from None
    except (OSError, ValueError) as error:
        raise HubRootError("%s: %s" % (path, error)) from None
    if not isinstance(value, dict):
        raise HubRootError("%s: not a JSON object" % path)
    return value


def write_repo(root, repo_id, commits, refs=None, tags=None, private=False, gated=False,
               last_modified=DEFAULT_LAST_MODIFIED):
    """Write a repository into a root: ``commits`` maps a commit sha to {path: bytes}; ``refs`` defaults to main on
    the last commit given."""
    repo_dir = os.path.join(root, *repo_id.split("/"))
    for sha, files in commits.items():
        if not COMMIT_RE.match(sha):
            raise ValueError("commit %r is not 40 lowercase hex digits" % sha)
        for path, data in files.items():
            target = os.path.join(repo_dir, "commits", sha, *path.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(data)
    config = {"private": private, "gated": gated, "refs": refs if refs is not None else {"main": list(commits)[-1]},
              "tags": tags or {}, "last_modified": last_modified}
    with open(os.path.join(repo_dir, "repo.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return repo_dir


def write_tokens(root, tokens):
    """hub.json with ``tokens`` ({token: {"user": name, "access": [repo ids]}})."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "hub.json"), "w", encoding="utf-8") as handle:
        json.dump({"tokens": tokens}, handle, indent=2, sort_keys=True)
        handle.write("\n")
