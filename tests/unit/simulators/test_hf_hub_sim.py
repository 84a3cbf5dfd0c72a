# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Hub stand-in (simulators/hf_hub): the generated model, the hashes, the API and its refusals, the faults."""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmops.serving.tests.support import hf_hub as support
from ansible_collections.llmops.serving.plugins.module_utils import model_config
from ansible_collections.llmops.serving.tests.support.hf_hub import MODEL_COMMIT, MODEL_REPO, model, repos
from sglang_sim import memory as sglang_sim_memory

STANDIN_MODEL = os.path.join(support.REPO_ROOT, "simulators", "standins", "models", "Qwen3.6-27B")
READER, GRANTED = "hf_standin_reader_token", "hf_standin_granted_token"
TOKENS = {READER: {"user": "reader", "access": []},
          GRANTED: {"user": "granted", "access": ["llmops-standin/gated", "llmops-standin/private"]}}


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # pylint: disable=too-many-arguments
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def call(url, method="GET", token=None, headers=None):
    """(status, headers, body) of one request; error statuses are answers too."""
    request = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    if token:
        request.add_header("Authorization", "Bearer %s" % token)
    try:
        with OPENER.open(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def commit_dir(root, repo_id=MODEL_REPO, commit=MODEL_COMMIT):
    return os.path.join(root, *repo_id.split("/"), "commits", commit)


@pytest.fixture
def gated_root(tmp_path):
    root = support.make_root(str(tmp_path / "root"), TOKENS)
    repos.write_repo(root, "llmops-standin/gated", {"2" * 40: {"config.json": b"{}\n"}}, gated="manual")
    repos.write_repo(root, "llmops-standin/private", {"3" * 40: {"config.json": b"{}\n"}}, private=True)
    return root


# -- the generated model ------------------------------------------------------------------------------------------


def read_safetensors(path):
    with open(path, "rb") as handle:
        data = handle.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    return header, len(data) - 8 - length


def test_the_model_is_generated_deterministically_with_the_fixture_commit(tmp_path):
    first, second = support.make_root(str(tmp_path / "a")), support.make_root(str(tmp_path / "b"))
    names = sorted(os.listdir(commit_dir(first)))
    assert names == sorted(os.listdir(commit_dir(second)))
    for name in names:
        with open(os.path.join(commit_dir(first), name), "rb") as one, \
                open(os.path.join(commit_dir(second), name), "rb") as two:
            assert one.read() == two.read(), name
    metadata = os.path.join(STANDIN_MODEL, ".cache", "huggingface", "download", "config.json.metadata")
    with open(metadata, encoding="utf-8") as handle:
        assert handle.readline().strip() == MODEL_COMMIT
    with open(os.path.join(STANDIN_MODEL, "config.json"), "rb") as staged, \
            open(os.path.join(commit_dir(first), "config.json"), "rb") as served:
        assert staged.read() == served.read()
    total = sum(os.path.getsize(os.path.join(commit_dir(first), name)) for name in names)
    assert 1 << 20 < total < 8 << 20


def test_the_shards_are_safetensors_and_the_index_names_every_tensor(tmp_path):
    root = support.make_root(str(tmp_path / "root"))
    with open(os.path.join(commit_dir(root), "model.safetensors.index.json"), encoding="utf-8") as handle:
        index = json.load(handle)
    shards = sorted(set(index["weight_map"].values()))
    assert shards == ["model-%05d-of-00004.safetensors" % k for k in range(1, 5)]
    total = 0
    for shard in shards:
        header, data_size = read_safetensors(os.path.join(commit_dir(root), shard))
        assert header.pop("__metadata__") == {"format": "pt", "standin": "hf_hub_sim"}
        offsets = sorted(tuple(entry["data_offsets"]) for entry in header.values())
        assert offsets[0][0] == 0 and offsets[-1][1] == data_size
        assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
        for name, entry in header.items():
            assert entry["dtype"] == "BF16"
            count = 2
            for dimension in entry["shape"]:
                count *= dimension
            assert entry["data_offsets"][1] - entry["data_offsets"][0] == count
            assert index["weight_map"][name] == shard
        total += data_size
    # The size of the checkpoint the config describes, not of the stand-in tensors (a few KiB each): what the memory
    # plan and the SGLang simulator count as the weights.
    assert total < 8 << 20 and index["metadata"]["total_size"] == model.CHECKPOINT_BYTES
    assert model.CHECKPOINT_BYTES == sglang_sim_memory.WEIGHT_BYTES_TOTAL
    with open(os.path.join(commit_dir(root), "config.json"), encoding="utf-8") as handle:
        dims = model_config.parse_model_config(json.load(handle))
    assert model_config.weight_bytes(dims)["total"] == model.CHECKPOINT_BYTES
    tensors = sum(len(read_safetensors(os.path.join(commit_dir(root), shard))[0]) - 1 for shard in shards)
    assert len(index["weight_map"]) == tensors


def test_hashes_are_computed_from_the_bytes_served(tmp_path):
    root = support.make_root(str(tmp_path / "root"))
    hub = repos.Hub(root)
    commit = hub.repos[MODEL_REPO].resolve("main")
    config = commit.files["config.json"]
    with open(config.local_path, "rb") as handle:
        data = handle.read()
    assert config.lfs_sha256 is None
    assert config.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # nosec - git's object id
    shard = commit.files["model-00001-of-00004.safetensors"]
    with open(shard.local_path, "rb") as handle:
        assert shard.lfs_sha256 == hashlib.sha256(handle.read()).hexdigest()
    pointer = repos.lfs_pointer(shard.lfs_sha256, shard.size).encode()
    assert shard.blob_id == hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()  # nosec
    assert commit.files["tokenizer.json"].lfs_sha256 and not commit.files["vocab.json"].lfs_sha256
    if shutil.which("git"):
        for repo_file in (config, commit.files["vocab.json"]):
            out = subprocess.run(["git", "hash-object", repo_file.local_path], capture_output=True, text=True,
                                 check=True)
            assert out.stdout.strip() == repo_file.blob_id


def test_a_root_that_names_a_missing_commit_is_refused(tmp_path):
    root = str(tmp_path / "root")
    repos.write_repo(root, "a/b", {"1" * 40: {"x": b"y"}}, refs={"main": "2" * 40})
    with pytest.raises(repos.HubRootError, match="names commit"):
        repos.Hub(root)


# -- the API --------------------------------------------------------------------------------------------------------


def test_model_info_resolves_the_revision_and_lists_the_files_with_their_hashes(hf_hub):
    hub = hf_hub()
    for revision in ("main", "v1", MODEL_COMMIT, MODEL_COMMIT[:7]):
        status, _headers, body = call("%s/api/models/%s/revision/%s?blobs=true" % (hub.endpoint, MODEL_REPO, revision))
        assert status == 200, body
        info = json.loads(body)
        assert info["sha"] == MODEL_COMMIT and info["id"] == MODEL_REPO and info["gated"] is False
    siblings = {sibling["rfilename"]: sibling for sibling in info["siblings"]}
    shard = siblings["model-00002-of-00004.safetensors"]
    assert set(shard) == {"rfilename", "size", "blobId", "lfs"} and len(shard["lfs"]["sha256"]) == 64
    assert "lfs" not in siblings["config.json"]
    status, _headers, body = call("%s/api/models/%s" % (hub.endpoint, MODEL_REPO))
    assert status == 200 and json.loads(body)["siblings"][0] == {"rfilename": ".gitattributes"}


def list_tree(url):
    """Every entry of a tree listing, following its pages: (entries, pages)."""
    entries, pages = [], 0
    while url and pages < 50:
        status, headers, body = call(url)
        assert status == 200, body
        entries += json.loads(body)
        pages += 1
        link = headers.get("Link")
        url = link.split(">")[0].lstrip("<") if link else None
    return entries, pages


def test_the_tree_is_paginated_with_link_headers(hf_hub, tmp_path):
    root = support.make_root(str(tmp_path / "root"))
    repos.write_repo(root, "llmops-standin/nested", {"4" * 40: {"a/b/c.json": b"1", "a/d.txt": b"2", "e": b"3"}})
    hub = hf_hub(root=root, tree_page_size=2)
    entries, pages = list_tree("%s/api/models/%s/tree/main?recursive=true&expand=false" % (hub.endpoint, MODEL_REPO))
    assert pages == 7 and len(entries) == 13
    assert {entry["path"] for entry in entries} == set(os.listdir(commit_dir(root)))
    entries, _pages = list_tree("%s/api/models/llmops-standin/nested/tree/main?recursive=true" % hub.endpoint)
    nested = {entry["path"]: entry for entry in entries}
    assert sorted(nested) == ["a", "a/b", "a/b/c.json", "a/d.txt", "e"]
    assert nested["a"]["type"] == "directory" and nested["a/b/c.json"]["size"] == 1
    if shutil.which("git"):
        # git's own tree ids for the same content.
        work = str(tmp_path / "git")
        shutil.copytree(commit_dir(root, "llmops-standin/nested", "4" * 40), work)
        subprocess.run(["git", "init", "-q", work], check=True)
        subprocess.run(["git", "-C", work, "add", "-A"], check=True)
        tree = subprocess.run(["git", "-C", work, "write-tree"], capture_output=True, text=True,
                              check=True).stdout.strip()
        for directory in ("a", "a/b"):
            oid = subprocess.run(["git", "-C", work, "rev-parse", "%s:%s" % (tree, directory)], capture_output=True,
                                 text=True, check=True).stdout.strip()
            assert nested[directory]["oid"] == oid
    entries, _pages = list_tree("%s/api/models/llmops-standin/nested/tree/main/a" % hub.endpoint)
    assert sorted(entry["path"] for entry in entries) == ["a/b", "a/d.txt"]


def test_resolve_serves_git_files_and_redirects_lfs_files_to_the_cdn(hf_hub):
    hub = hf_hub()
    status, headers, body = call("%s/%s/resolve/main/config.json" % (hub.endpoint, MODEL_REPO), method="HEAD")
    with open(os.path.join(STANDIN_MODEL, "config.json"), "rb") as handle:
        config = handle.read()
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == MODEL_COMMIT
    assert headers["ETag"] == '"%s"' % repos.git_blob_sha1([config], len(config))
    assert int(headers["Content-Length"]) == len(config)
    assert "X-Xet-Hash" not in headers
    shard = "%s/%s/resolve/%s/model-00001-of-00004.safetensors" % (hub.endpoint, MODEL_REPO, MODEL_COMMIT)
    status, headers, _body = call(shard, method="HEAD")
    assert status == 302 and headers["Location"].startswith(hub.cdn + "/lfs/")
    sha256, size = headers["X-Linked-Etag"].strip('"'), int(headers["X-Linked-Size"])
    status, cdn_headers, body = call(headers["Location"])
    assert status == 200 and hashlib.sha256(body).hexdigest() == sha256 and len(body) == size
    status, cdn_headers, body = call(headers["Location"], headers={"Range": "bytes=100-"})
    assert status == 206 and len(body) == size - 100
    assert cdn_headers["Content-Range"] == "bytes 100-%d/%d" % (size - 1, size)
    status, cdn_headers, _body = call(headers["Location"], headers={"Range": "bytes=%d-" % size})
    assert status == 416 and cdn_headers["Content-Range"] == "bytes */%d" % size
    assert [entry["listener"] for entry in hub.requests()].count("cdn") == 3


# -- refusals ---------------------------------------------------------------------------------------------------------


def test_refusals_carry_the_hubs_status_codes_error_codes_and_messages(hf_hub, gated_root):
    hub = hf_hub(root=gated_root)
    api = "%s/api/models/%%s/revision/main" % hub.endpoint
    resolve = "%s/%%s/resolve/main/config.json" % hub.endpoint
    cases = [
        (api % "nobody/nothing", None, 401, None, "Invalid username or password."),
        (api % "llmops-standin/private", None, 401, None, "Invalid username or password."),
        (api % "nobody/nothing", READER, 404, "RepoNotFound", None),
        (api % "llmops-standin/private", READER, 404, "RepoNotFound", None),
        (api % MODEL_REPO, "hf_not_a_token", 401, None, "Invalid credentials in Authorization header"),
        ("%s/api/models/%s/revision/nope" % (hub.endpoint, MODEL_REPO), None, 404, "RevisionNotFound",
         "Invalid rev id: nope"),
        ("%s/%s/resolve/main/nope.json" % (hub.endpoint, MODEL_REPO), None, 404, "EntryNotFound", None),
        (resolve % "llmops-standin/gated", None, 401, "GatedRepo",
         "Access to model llmops-standin/gated is restricted. You must have access to it and be authenticated to "
         "access it. Please log in."),
        (resolve % "llmops-standin/gated", READER, 403, "GatedRepo",
         "Access to model llmops-standin/gated is restricted and you are not in the authorized list. Visit "
         "https://huggingface.co/llmops-standin/gated to ask for access."),
    ]
    for url, token, status, code, message in cases:
        got, headers, body = call(url, token=token)
        assert (got, headers.get("X-Error-Code"), headers.get("X-Error-Message")) == (status, code, message), url
        assert json.loads(body).get("error") == message
    _status, headers, _body = call("%s/%s/resolve/main/nope.json" % (hub.endpoint, MODEL_REPO))
    assert headers["X-Repo-Commit"] == MODEL_COMMIT
    # A gated repository's listing stays readable; its files need a token with access; private ones likewise.
    assert call(api % "llmops-standin/gated")[0] == 200
    assert call(resolve % "llmops-standin/gated", token=GRANTED)[0] == 200
    assert call(api % "llmops-standin/private", token=GRANTED)[0] == 200
    assert all(entry["auth"] in ("none", "bearer") for entry in hub.requests())
    assert {entry["client"] for entry in hub.requests()} == {"127.0.0.1"}
    assert not any(READER in json.dumps(entry) or GRANTED in json.dumps(entry) for entry in hub.requests())


# -- faults -----------------------------------------------------------------------------------------------------------


def shard_url(hub, name="model-00002-of-00004.safetensors"):
    _status, headers, _body = call("%s/%s/resolve/main/%s" % (hub.endpoint, MODEL_REPO, name), method="HEAD")
    return headers["Location"], headers["X-Linked-Etag"].strip('"'), int(headers["X-Linked-Size"])


def test_a_cut_transfer_ends_mid_body_and_a_resume_is_served(hf_hub):
    hub = hf_hub(faults={"cut_after": {"model-00002-of-00004.safetensors": 300000},
                         "cut_count": {"model-00002-of-00004.safetensors": 2}})
    url, sha256, size = shard_url(hub)
    for _attempt in range(2):
        with pytest.raises(http.client.IncompleteRead) as cut:
            call(url)
        assert len(cut.value.partial) == 300000
    status, _headers, body = call(url)
    assert status == 200 and hashlib.sha256(body).hexdigest() == sha256 and len(body) == size
    hub.set_faults({"cut_after": {"model-00002-of-00004.safetensors": 300000}})
    status, _headers, tail = call(url, headers={"Range": "bytes=%d-" % (size - 1000)})
    assert status == 206 and tail == body[-1000:]
    cuts = [entry for entry in hub.requests() if entry.get("cut")]
    assert [entry["bytes"] for entry in cuts] == [300000, 300000]


def test_a_damaged_byte_keeps_the_announced_size_and_hash(hf_hub):
    hub = hf_hub(faults={"damage": {"model-00003-of-00004.safetensors": 5000}})
    url, sha256, size = shard_url(hub, "model-00003-of-00004.safetensors")
    _status, _headers, body = call(url)
    assert len(body) == size and hashlib.sha256(body).hexdigest() != sha256
    with open(os.path.join(commit_dir(hub_root(hub)), "model-00003-of-00004.safetensors"), "rb") as handle:
        intact = handle.read()
    assert [i for i in range(size) if body[i] != intact[i]] == [5000] and body[5000] == intact[5000] ^ 0xFF


def hub_root(hub):
    return hub.root


def test_an_invalid_fault_file_leaves_the_previous_switches_and_is_refused_at_start(hf_hub, tmp_path):
    from hf_hub_sim import faults  # pylint: disable=import-outside-toplevel

    for bad in ({"cut_after": {"x": 0}}, {"bytes_per_second": 10}, {"latency_ms": 20000}, {"typo": 1}, []):
        with pytest.raises(faults.FaultError):
            faults.validate(bad)
    hub = hf_hub(faults={"damage": {"config.json": 0}})
    hub.set_faults({"bytes_per_second": 1})
    _status, _headers, body = call("%s/%s/resolve/main/config.json" % (hub.endpoint, MODEL_REPO))
    with open(os.path.join(STANDIN_MODEL, "config.json"), "rb") as handle:
        assert body[0] == handle.read()[0] ^ 0xFF
    bad_faults = tmp_path / "bad.json"
    bad_faults.write_text('{"bytes_per_second": 10}')
    out = subprocess.run([sys.executable, "-m", "hf_hub_sim", "serve", "--root", hub_root(hub), "--faults",
                          str(bad_faults)], env=dict(os.environ, PYTHONPATH=support.HUB_SOURCE), capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 2 and "bytes_per_second" in out.stderr


def test_a_throttled_body_takes_its_time(hf_hub):
    hub = hf_hub(faults={"bytes_per_second": 200000})
    url, _sha256, size = shard_url(hub)
    began = time.monotonic()
    _status, _headers, body = call(url)
    assert len(body) == size and time.monotonic() - began >= size / 200000 * 0.8
