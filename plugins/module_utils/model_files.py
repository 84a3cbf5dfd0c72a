# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A model directory on the target, checked against what it should hold: every file of a revision (sizes, and
hashes: sha256 for LFS files, git's blob sha1 for the others) and every shard model.safetensors.index.json names.

The directory is untrusted input: names (from the hub's listing or the index) with "..", an absolute path, an empty
or "." part or a control character are refused without touching the disk; a symlink is followed only when it stays
inside the directory; anything that is not a regular file (a FIFO, a socket, a device, a directory) is named, never
opened, and a file is opened non-blocking and checked to be the regular file that was inspected before it is read.
The index is read up to MAX_INDEX_BYTES, a safetensors header up to MAX_HEADER_BYTES.

Hashing a 56 GiB model on every run is too slow, so verified hashes are kept in <dir>/.cache/llmops/hashes.json keyed
by the file's (size, mtime_ns, ctime_ns, inode, device): an unchanged file is not hashed again, a file whose stat
changed is. hf download's partial files (<dir>/.cache/huggingface/download/**/*.incomplete) are counted: huggingface_hub
2.4.0 never reuses one left by a killed run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile

INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
CONFIG = "config.json"
HF_DOWNLOAD_DIR = os.path.join(".cache", "huggingface", "download")
CACHE_DIR = os.path.join(".cache", "llmops")
CACHE_FILE = "hashes.json"
CACHE_VERSION = 1
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_CACHE_BYTES = 64 * 1024 * 1024
# The safetensors format's own limit on the header (safetensors' N_MAX... 100 MB).
MAX_HEADER_BYTES = 100 * 1000 * 1000
MAX_INCOMPLETE_ENTRIES = 100000
CHUNK = 4 * 1024 * 1024
SHA256 = "sha256"
GIT_BLOB_SHA1 = "git-blob-sha1"


class ModelDirError(Exception):
    """The directory itself cannot be checked (the message says why)."""


def printable(name):
    """A name as it can be shown: control and other non-printable characters escaped."""
    if isinstance(name, str) and name.isprintable():
        return name
    return str(name).encode("unicode_escape").decode("ascii")


def name_error(name):
    """Why a repository path is refused as a path under the directory, or None."""
    if not isinstance(name, str) or not name:
        return "not a file name"
    if not name.isprintable():
        return "contains a control character"
    if name.startswith("/") or "\\" in name:
        return "is an absolute path or has a backslash"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' part"
    return None


def _kind(mode):
    for test, kind in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "special file"


class Inspection:
    """What ModelDir.inspect found at a path."""

    def __init__(self, state, info=None, real_path=None, problem=None, removable=None):
        self.state = state
        self.info = info
        self.real_path = real_path
        self.problem = problem
        self.removable = removable


class ModelDir:
    """The directory, resolved once; every path is checked to stay inside it."""

    def __init__(self, path):
        self.path = path
        try:
            self.real = os.path.realpath(path)
            self.exists = os.path.isdir(self.real)
        except OSError as exc:
            raise ModelDirError("%s: %s" % (path, exc)) from None

    def contains(self, real):
        return real == self.real or real.startswith(self.real.rstrip("/") + "/")

    def inspect(self, name):
        """What is at a repository path: an Inspection whose state is "file" (``info``, ``real_path``),
        "missing", "unsafe" (``problem`` says why) or "not_regular" (``problem`` names what is there instead;
        ``removable`` is the path to delete to make room, None when that is not a plain unlink)."""
        problem = name_error(name)
        if problem:
            return Inspection("unsafe", problem=problem)
        if not self.exists:
            return Inspection("missing")
        current = self.real
        parts = name.split("/")
        for depth, part in enumerate(parts):
            current = os.path.join(current, part)
            last = depth == len(parts) - 1
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                return Inspection("missing")
            except OSError as exc:
                return Inspection("not_regular", problem="cannot be inspected: %s" % exc.strerror)
            link = current if stat.S_ISLNK(info.st_mode) else None
            if link:
                target = os.path.realpath(link)
                if not self.contains(target):
                    return Inspection("not_regular", problem="a symlink to %s, outside the model directory"
                                      % printable(target), removable=link if last else None)
                try:
                    info = os.stat(target)
                except OSError:
                    return Inspection("not_regular", problem="a dangling symlink to %s" % printable(target),
                                      removable=link if last else None)
                current = target
            if not last and not stat.S_ISDIR(info.st_mode):
                return Inspection("not_regular", problem="under %s, which is a %s, not a directory" % (
                    printable("/".join(parts[:depth + 1])), _kind(info.st_mode)))
            if last and not stat.S_ISREG(info.st_mode):
                kind = _kind(info.st_mode)
                return Inspection("not_regular", problem="a %s, not a regular file" % kind,
                                  removable=None if kind == "directory" else (link or current))
        return Inspection("file", info=info, real_path=current)

    def open_regular(self, real_path, expected):
        """A read-only fd of ``real_path``, which must still be the regular file ``expected`` described (opened
        non-blocking, so a FIFO swapped in cannot hang the check)."""
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(real_path, flags)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (expected.st_dev, expected.st_ino):
            os.close(fd)
            raise OSError(errno.ESTALE, "changed while it was checked")
        return fd


def hash_file(model_dir, real_path, expected, algorithm):
    """The hex digest of a regular file: sha256 of its bytes, or git's blob id (sha1 of "blob <size>\\0" + bytes)."""
    fd = model_dir.open_regular(real_path, expected)
    try:
        if algorithm == SHA256:
            digest = hashlib.sha256()
        else:
            digest = hashlib.sha1(b"blob %d\0" % expected.st_size)  # nosec - git's object id, not a security hash
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _stat_key(info):
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


class HashCache:
    """Verified hashes by path, valid while the file's stat key is unchanged. A cache that cannot be read (missing,
    not JSON, too large, a symlink) is an empty one."""

    def __init__(self, model_dir, enabled=True):
        self.model_dir = model_dir
        self.enabled = enabled
        self.entries = {}
        self.changed = False
        if enabled and model_dir.exists:
            self.entries = self._load()

    def _path(self):
        return os.path.join(self.model_dir.real, CACHE_DIR, CACHE_FILE)

    def _load(self):
        try:
            fd = os.open(self._path(), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return {}
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or os.fstat(fd).st_size > MAX_CACHE_BYTES:
                return {}
            data = b""
            while len(data) <= MAX_CACHE_BYTES:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                data += chunk
            value = json.loads(data.decode("utf-8"))
        except (OSError, ValueError):
            return {}
        finally:
            os.close(fd)
        if not isinstance(value, dict) or value.get("version") != CACHE_VERSION:
            return {}
        if not isinstance(value.get("files"), dict):
            return {}
        return value["files"]

    def get(self, name, info, algorithm):
        entry = self.entries.get(name)
        if isinstance(entry, dict) and entry.get("stat") == _stat_key(info) and entry.get("algorithm") == algorithm:
            digest = entry.get("digest")
            return digest if isinstance(digest, str) else None
        return None

    def put(self, name, info, algorithm, digest):
        self.entries[name] = {"stat": _stat_key(info), "algorithm": algorithm, "digest": digest}
        self.changed = True

    def save(self):
        """Write the cache atomically under <dir>/.cache/llmops (never through a symlink); False when it cannot."""
        if not (self.enabled and self.changed and self.model_dir.exists):
            return False
        directory = self.model_dir.real
        for part in CACHE_DIR.split(os.sep):
            directory = os.path.join(directory, part)
            try:
                os.mkdir(directory, 0o755)
            except FileExistsError:
                pass
            except OSError:
                return False
            if os.path.islink(directory) or not os.path.isdir(directory):
                return False
        try:
            fd, tmp = tempfile.mkstemp(prefix=".hashes.", dir=directory)
            with os.fdopen(fd, "w") as handle:
                json.dump({"version": CACHE_VERSION, "files": self.entries}, handle, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, os.path.join(directory, CACHE_FILE))
        except OSError:
            return False
        return True


def read_json_bounded(model_dir, real_path, info, limit):
    """(value, None) or (None, why) for a JSON file of at most ``limit`` bytes."""
    if info.st_size > limit:
        return None, "is %d bytes, more than the %d this check reads" % (info.st_size, limit)
    try:
        fd = model_dir.open_regular(real_path, info)
    except OSError as exc:
        return None, "cannot be read: %s" % exc.strerror
    try:
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        return None, "is more than %d bytes" % limit
    try:
        return json.loads(data.decode("utf-8")), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, "is not JSON: %s" % str(exc)[:200]


def read_index(model_dir):
    """The weight index: {"present", "shards" (sorted), "weight_map", "error", "unsafe", "index" (the parsed JSON)}."""
    found = model_dir.inspect(INDEX)
    result = {"present": found.state == "file", "shards": [], "weight_map": {}, "error": None, "unsafe": [], "index": None}
    if found.state == "missing":
        return result
    if found.state != "file":
        result["error"] = "%s is %s" % (INDEX, found.problem)
        return result
    value, error = read_json_bounded(model_dir, found.real_path, found.info, MAX_INDEX_BYTES)
    if error:
        result["error"] = "%s %s" % (INDEX, error)
        return result
    result["index"] = value
    weight_map = value.get("weight_map") if isinstance(value, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        result["error"] = "%s has no weight_map of tensor names to shard files" % INDEX
        return result
    shards = set()
    for shard in weight_map.values():
        problem = name_error(shard)
        if problem:
            result["unsafe"].append("%s (in %s's weight_map) %s" % (printable(shard), INDEX, problem))
        else:
            shards.add(shard)
    result["shards"] = sorted(shards)
    result["weight_map"] = weight_map
    return result


def read_safetensors_header(model_dir, real_path, info):
    """(header, length, None) of a .safetensors file, or (None, None, why): the 8-byte length and the JSON header
    after it, at most MAX_HEADER_BYTES, read from the regular file ``info`` described (never the tensors)."""
    if info.st_size < 8:
        return None, None, "is %d bytes, shorter than a safetensors header" % info.st_size
    try:
        fd = model_dir.open_regular(real_path, info)
    except OSError as exc:
        return None, None, "cannot be read: %s" % exc.strerror
    try:
        length = int.from_bytes(os.read(fd, 8), "little")
        if length > MAX_HEADER_BYTES or 8 + length > info.st_size:
            return None, None, "announces a %d-byte header in a %d-byte file" % (length, info.st_size)
        data = b""
        while len(data) < length:
            chunk = os.read(fd, min(CHUNK, length - len(data)))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    try:
        header = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None, None, "has a header that is not JSON"
    if not isinstance(header, dict):
        return None, None, "has a header that is not a JSON object"
    return header, length, None


def safetensors_problem(model_dir, real_path, info, tensors=()):
    """Why a .safetensors file is not whole (a header that does not parse, data that ends before the header says,
    tensors the index puts in it that it does not hold), or None. Reads only the header."""
    header, length, problem = read_safetensors_header(model_dir, real_path, info)
    if problem:
        return problem
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return "has a tensor without data_offsets: %s" % printable(name)[:200]
        end = max(end, offsets[1])
    if 8 + length + end != info.st_size:
        return "is %d bytes, but its header needs %d (truncated or padded)" % (info.st_size, 8 + length + end)
    absent = sorted(set(tensors) - set(header))
    if absent:
        return "lacks %d tensor(s) the index puts in it, e.g. %s" % (len(absent), printable(absent[0])[:200])
    return None


HF_QUANT_CONFIG = "hf_quant_config.json"
MAX_CONFIG_BYTES = 16 * 1024 * 1024
# Headers read for the memory plan: a checkpoint with more shards than this is planned from its index.
MAX_PLAN_SHARDS = 4096


def _read_json_file(model_dir, name, limit):
    """(value, None), (None, None) when absent, or (None, why)."""
    found = model_dir.inspect(name)
    if found.state == "missing":
        return None, None
    if found.state != "file":
        return None, "%s is %s" % (name, found.problem)
    value, error = read_json_bounded(model_dir, found.real_path, found.info, limit)
    return value, ("%s %s" % (name, error) if error else None)


def read_for_plan(path):
    """What the memory plan reads of a model directory, read as check() reads it (names checked, symlinks only
    inside, regular files only, opened non-blocking, bounded): ``config`` (config.json; ModelDirError when it cannot
    be read), ``hf_quant_config``, ``index`` (the parsed index JSON) and ``headers`` (``{shard: safetensors header}``
    of every shard the index names, or of model.safetensors; None when one cannot be read, and ``headers_problem``
    says why)."""
    model_dir = ModelDir(path)
    if not model_dir.exists:
        raise ModelDirError("%s is not a directory" % path)
    config, error = _read_json_file(model_dir, CONFIG, MAX_CONFIG_BYTES)
    if config is None:
        raise ModelDirError(error or "%s has no %s" % (path, CONFIG))
    quant, error = _read_json_file(model_dir, HF_QUANT_CONFIG, MAX_CONFIG_BYTES)
    if error:
        raise ModelDirError(error)
    # The index is read once, as check() reads it; one that cannot be read is an error, as before.
    listed = read_index(model_dir)
    if listed["present"] and listed["index"] is None:
        raise ModelDirError(listed["error"])
    result = {"config": config, "hf_quant_config": quant, "index": listed["index"], "headers": None, "headers_problem": None}
    if listed["present"]:
        shards = listed["shards"]
        problem = listed["error"] or (listed["unsafe"][0] if listed["unsafe"] else None)
    else:
        shards, problem = [SINGLE_WEIGHTS], None
    if not problem and len(shards) > MAX_PLAN_SHARDS:
        problem = "%d shards, more than the %d the plan reads" % (len(shards), MAX_PLAN_SHARDS)
    headers = {}
    for shard in [] if problem else shards:
        found = model_dir.inspect(shard)
        if found.state != "file":
            problem = "%s is %s" % (printable(shard), found.problem or "missing")
            break
        header, _length, why = read_safetensors_header(model_dir, found.real_path, found.info)
        if why:
            problem = "%s %s" % (printable(shard), why)
            break
        headers[shard] = header
    if problem:
        result["headers_problem"] = problem
    else:
        result["headers"] = headers
    return result


def incomplete_files(model_dir):
    """hf download's partial files under <dir>/.cache/huggingface/download: [{"path", "size"}] (regular files only,
    no symlink followed, at most MAX_INCOMPLETE_ENTRIES entries looked at)."""
    found = []
    root = os.path.join(model_dir.real, HF_DOWNLOAD_DIR)
    # A symlink anywhere on the way (.cache, .cache/huggingface) would list, and have root delete, files elsewhere.
    if not model_dir.exists or os.path.islink(root) or not os.path.isdir(root) or \
            not model_dir.contains(os.path.realpath(root)):
        return found
    seen = 0
    for current, dirs, names in os.walk(root, followlinks=False):
        for name in names:
            seen += 1
            if seen > MAX_INCOMPLETE_ENTRIES:
                return found
            if name.endswith(".incomplete"):
                path = os.path.join(current, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    found.append({"path": path, "size": info.st_size})
        dirs.sort()
    return sorted(found, key=lambda entry: entry["path"])


def download_metadata_path(model_dir, name):
    """Where hf download --local-dir records a file's commit and etag."""
    return os.path.join(model_dir.real, HF_DOWNLOAD_DIR, *(name + ".metadata").split("/"))


def free_space(path):
    """(free bytes for an unprivileged writer, the directory measured): the nearest existing directory."""
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    info = os.statvfs(current)
    return info.f_bavail * info.f_frsize, current


def check(path, expected=None, verify="hash", use_cache=True, write_cache=True):
    """Compare the directory with ``expected`` ({name: {"size", "blob_id", "sha256"}} from the hub, or None for the
    checks that need no hub: config.json and the index's shards present, safetensors headers whole).

    Returns a dict: files, missing, wrong_size, damaged, not_regular, unsafe_names, index, missing_shards,
    shards_not_in_revision, safetensors_problems, present_bytes, expected_bytes, download_bytes, reclaimable_bytes
    (bytes of files that are in the way), remove (paths to delete before downloading again), incomplete,
    hashing, weights ("sharded", "single" or "none")."""
    model_dir = ModelDir(path)
    cache = HashCache(model_dir, enabled=use_cache)
    result = {"missing": [], "wrong_size": [], "damaged": [], "not_regular": [], "unsafe_names": [],
              "safetensors_problems": [], "present_bytes": 0, "expected_bytes": 0, "download_bytes": 0,
              "reclaimable_bytes": 0, "remove": [], "hashing": {"hashed_files": 0, "hashed_bytes": 0,
                                                                "cached_files": 0}}
    index = read_index(model_dir)
    result["unsafe_names"].extend(index.pop("unsafe"))
    tensors_by_shard = {}
    for tensor, shard in index.pop("weight_map").items():
        tensors_by_shard.setdefault(shard, []).append(tensor)
    result["index"] = dict({key: value for key, value in index.items() if key != "index"}, shards=len(index["shards"]))

    names = {}
    if expected is None:
        for name in [CONFIG] + index["shards"] + ([SINGLE_WEIGHTS] if not index["present"] else []):
            names[name] = None
    else:
        for name, entry in expected.items():
            problem = name_error(name)
            if problem:
                result["unsafe_names"].append("%s (in the hub's list) %s" % (printable(name), problem))
            else:
                names[name] = entry
    result["files"] = len(names)

    shard_names = set(index["shards"])
    states = {}
    for name in sorted(names):
        entry = names[name]
        found = model_dir.inspect(name)
        states[name] = found.state
        size = entry["size"] if entry else None
        if size is not None:
            result["expected_bytes"] += size
        if found.state == "missing":
            if expected is None and name == SINGLE_WEIGHTS:
                continue
            result["missing"].append(name)
            result["download_bytes"] += size or 0
            continue
        if found.state != "file":
            result["not_regular"].append({"path": printable(name), "problem": found.problem})
            result["download_bytes"] += size or 0
            if found.removable:
                _plan_removal(model_dir, name, result, 0, found.removable)
            continue
        info = found.info
        if size is not None and info.st_size != size:
            result["wrong_size"].append({"path": name, "size": info.st_size, "expected_size": size})
            result["download_bytes"] += size
            _plan_removal(model_dir, name, result, info.st_size)
            continue
        hashed = bool(entry) and verify == "hash"
        if hashed:
            algorithm, wanted = (SHA256, entry["sha256"]) if entry.get("sha256") else (GIT_BLOB_SHA1, entry["blob_id"])
            digest = cache.get(name, info, algorithm)
            if digest is None:
                try:
                    digest = hash_file(model_dir, found.real_path, info, algorithm)
                except OSError as exc:
                    result["not_regular"].append({"path": name, "problem": "cannot be read: %s" % exc.strerror})
                    result["download_bytes"] += size
                    continue
                cache.put(name, info, algorithm, digest)
                result["hashing"]["hashed_files"] += 1
                result["hashing"]["hashed_bytes"] += info.st_size
            else:
                result["hashing"]["cached_files"] += 1
            if digest != wanted:
                result["damaged"].append({"path": name, "algorithm": algorithm, "expected": wanted, "actual": digest})
                result["download_bytes"] += size
                _plan_removal(model_dir, name, result, info.st_size)
                continue
        if not hashed and name.endswith(".safetensors") and (name in shard_names or name == SINGLE_WEIGHTS):
            # Without a hash to compare, the header at least tells a truncated shard from a whole one.
            problem = safetensors_problem(model_dir, found.real_path, info, tensors_by_shard.get(name, ()))
            if problem:
                result["safetensors_problems"].append({"path": name, "problem": problem})
                if expected is not None:
                    result["download_bytes"] += size or 0
                    _plan_removal(model_dir, name, result, info.st_size)
                continue
        result["present_bytes"] += info.st_size

    result["missing_shards"] = sorted(shard for shard in index["shards"] if states.get(shard) != "file")
    result["shards_not_in_revision"] = sorted(shard for shard in index["shards"]
                                              if expected is not None and shard not in names)
    if index["present"]:
        result["weights"] = "sharded"
    else:
        result["weights"] = "single" if states.get(SINGLE_WEIGHTS) == "file" else "none"
    incomplete = incomplete_files(model_dir)
    result["incomplete"] = {"files": incomplete, "bytes": sum(entry["size"] for entry in incomplete)}
    if write_cache:
        cache.save()
    return result


def _plan_removal(model_dir, name, result, size, path=None):
    """A file in the way of the download goes, with the metadata hf keeps for it (else hf would trust it again)."""
    result["remove"].append(path or os.path.join(model_dir.real, *name.split("/")))
    result["reclaimable_bytes"] += size
    metadata = download_metadata_path(model_dir, name)
    # Only a record inside the directory (no symlinked parent on the way) that is not a directory: root removes it.
    try:
        info = os.lstat(metadata)
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode) and model_dir.contains(
            os.path.realpath(os.path.dirname(metadata))):
        result["remove"].append(metadata)


def shortened(names, limit=12):
    """Names for a sentence: the first ``limit``, then how many more."""
    shown = ", ".join(printable(name) for name in names[:limit])
    return shown + (" and %d more" % (len(names) - limit) if len(names) > limit else "")


def problems(result, expected_given):
    """One sentence per thing that keeps the directory from being the model it should be."""
    sentences = []
    if result["missing"]:
        sentences.append("missing: %s" % shortened(result["missing"]))
    for entry in result["wrong_size"]:
        sentences.append("%s is %d bytes, the revision's is %d" % (printable(entry["path"]), entry["size"],
                                                                   entry["expected_size"]))
    for entry in result["damaged"]:
        sentences.append("%s is damaged: its %s is %s, the revision's %s" % (
            printable(entry["path"]), entry["algorithm"], entry["actual"], entry["expected"]))
    for entry in result["not_regular"]:
        sentences.append("%s is %s" % (entry["path"], entry["problem"]))
    for entry in result["safetensors_problems"]:
        sentences.append("%s %s" % (printable(entry["path"]), entry["problem"]))
    sentences.extend(result["unsafe_names"])
    if result["index"]["error"]:
        sentences.append(result["index"]["error"])
    if result["missing_shards"] and not expected_given:
        sentences.append("%s names shards that are not here: %s" % (INDEX, shortened(result["missing_shards"])))
    if result["shards_not_in_revision"]:
        sentences.append("%s names shards the revision does not have: %s" % (
            INDEX, shortened(result["shards_not_in_revision"])))
    return sentences
