# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/hf_hub: the Hub's protocol against the Hub stand-in (simulators/hf_hub) and against a hostile server."""
from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import hf_hub as hub_api
from ansible_collections.llmops.serving.tests.support import hf_hub as support
from ansible_collections.llmops.serving.tests.support.hf_hub import MODEL_COMMIT, MODEL_REPO, repos

READER, GRANTED = "hf_standin_reader_token", "hf_standin_granted_token"
TOKENS = {READER: {"user": "reader", "access": []}, GRANTED: {"user": "granted", "access": ["llmops-standin/gated"]}}


@pytest.fixture
def gated_hub(hf_hub, tmp_path):
    root = support.make_root(str(tmp_path / "root"), TOKENS)
    repos.write_repo(root, "llmops-standin/gated", {"2" * 40: {"config.json": b"{}\n"}}, gated="manual")
    return hf_hub(root=root, tree_page_size=3)


@pytest.mark.parametrize("repo_id", ["", "a/b/c", "a b/c", "../x", "a/..", "a--b/c", "a/b.git", "a/b?x=1", None,
                                     "x" * 97])
def test_repository_ids_the_hub_refuses(repo_id):
    assert hub_api.repo_id_error(repo_id)


def test_repository_ids_and_endpoints_it_accepts():
    assert hub_api.repo_id_error("Qwen/Qwen3.6-27B") is None and hub_api.repo_id_error("gpt2") is None
    assert hub_api.endpoint_error("https://huggingface.co") is None
    for endpoint in ("ftp://x", "huggingface.co", "https://user:pw@host", "https://h/?q=1"):
        assert hub_api.endpoint_error(endpoint)


def test_a_revision_resolves_to_its_commit_and_the_paginated_tree_lists_every_file(gated_hub):
    hub = hub_api.Hub(gated_hub.endpoint)
    assert hub.revision(MODEL_REPO, "main") == {"commit": MODEL_COMMIT, "gated": False, "private": False}
    assert hub.revision(MODEL_REPO, "v1")["commit"] == MODEL_COMMIT
    files, refused = hub_api.file_entries(hub.tree(MODEL_REPO, MODEL_COMMIT))
    served = repos.Hub(gated_hub.root).repos[MODEL_REPO].commits[MODEL_COMMIT].files
    assert refused == [] and set(files) == set(served)
    for name, entry in files.items():
        assert entry == {"size": served[name].size, "blob_id": served[name].blob_id, "sha256": served[name].lfs_sha256}
    tree_pages = [entry for entry in gated_hub.requests() if "/tree/" in entry["path"]]
    assert len(tree_pages) == 5  # 13 files, 3 per page


def test_refusals_are_read_as_the_client_reads_them(gated_hub):
    anonymous, reader, wrong = (hub_api.Hub(gated_hub.endpoint, token) for token in (None, READER, "hf_wrong"))
    cases = [
        (lambda: anonymous.revision("nobody/nothing", "main"), hub_api.REPO_NOT_FOUND, 401),
        (lambda: reader.revision("nobody/nothing", "main"), hub_api.REPO_NOT_FOUND, 404),
        (lambda: anonymous.revision(MODEL_REPO, "nope"), hub_api.REVISION_NOT_FOUND, 404),
        (lambda: wrong.revision(MODEL_REPO, "main"), hub_api.INVALID_TOKEN, 401),
        (lambda: anonymous.check_download_access("llmops-standin/gated", "2" * 40, "config.json"), hub_api.GATED, 401),
        (lambda: reader.check_download_access("llmops-standin/gated", "2" * 40, "config.json"), hub_api.GATED, 403),
        (lambda: anonymous.check_download_access(MODEL_REPO, MODEL_COMMIT, "nope.json"), hub_api.ENTRY_NOT_FOUND, 404),
    ]
    for call, kind, status in cases:
        with pytest.raises(hub_api.HubError) as refused:
            call()
        assert (refused.value.kind, refused.value.status) == (kind, status), refused.value.message
        assert READER not in refused.value.message and "hf_wrong" not in refused.value.message
    # A gated repository's listing is readable; its files need a token with access.
    assert anonymous.revision("llmops-standin/gated", "main")["gated"] == "manual"
    hub_api.Hub(gated_hub.endpoint, GRANTED).check_download_access("llmops-standin/gated", "2" * 40, "config.json")
    with pytest.raises(hub_api.HubError, match="Invalid rev id: nope"):
        anonymous.revision(MODEL_REPO, "nope")


def test_an_unreachable_hub(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(hub_api.HubError) as failed:
        hub_api.Hub("http://127.0.0.1:%d" % port, "hf_secret_token", timeout=5).revision(MODEL_REPO, "main")
    assert failed.value.kind == hub_api.UNREACHABLE and "hf_secret_token" not in failed.value.message


def test_tls_with_the_sites_ca(hf_hub):
    hub = hf_hub(tls=True)
    assert hub_api.Hub(hub.endpoint, ca_path=hub.ca_file).revision(MODEL_REPO, "main")["commit"] == MODEL_COMMIT
    with pytest.raises(hub_api.HubError) as untrusted:
        hub_api.Hub(hub.endpoint).revision(MODEL_REPO, "main")
    assert untrusted.value.kind == hub_api.UNREACHABLE
    # Anonymous "not found" over https, as the client reads a 401 on a repository URL.
    with pytest.raises(hub_api.HubError) as missing:
        hub_api.Hub(hub.endpoint, ca_path=hub.ca_file).revision("nobody/nothing", "main")
    assert missing.value.kind == hub_api.REPO_NOT_FOUND


# -- a hostile server -------------------------------------------------------------------------------------------------


def test_a_server_that_echoes_the_token_never_gets_it_into_a_message(hostile):
    def echo(handler):
        return json.dumps({"error": "you sent %s" % handler.headers.get("Authorization")}).encode()

    _server, endpoint = hostile({"/api/models/a/b/revision/main": (500, {}, echo)})
    with pytest.raises(hub_api.HubError) as failed:
        hub_api.Hub(endpoint, "hf_secret_token").revision("a/b", "main")
    assert "hf_secret_token" not in failed.value.message and "********" in failed.value.message


def test_redirects_leave_the_token_on_the_endpoints_origin(hostile):
    other, other_url = hostile({"/api/models/a/b/revision/main": (200, {}, b'{"sha": "%s"}' % (b"1" * 40))})
    server, endpoint = hostile({
        "/api/models/a/b/revision/main": (307, {"Location": "/api/models/c/d/revision/main"}, b""),
        "/api/models/c/d/revision/main": (307, {"Location": other_url + "/api/models/a/b/revision/main"}, b"")})
    with pytest.raises(hub_api.HubError) as failed:
        hub_api.Hub(endpoint, "hf_secret_token").revision("a/b", "main")
    assert failed.value.kind == hub_api.PROTOCOL and "another origin" in failed.value.message
    assert [auth for _path, auth in server.seen] == ["Bearer hf_secret_token"] * 2 and other.seen == []


def test_answers_that_are_not_the_hubs(hostile):
    _server, endpoint = hostile({
        "/api/models/a/b/revision/main": (200, {}, b"<html>captive portal</html>"),
        "/api/models/a/c/revision/main": (200, {}, b'{"sha": "not-a-commit"}'),
        "/api/models/a/d/tree/%s" % ("1" * 40): (200, {"Link": '<http://elsewhere.example/x>; rel="next"'}, b"[]"),
        "/api/models/a/e/tree/%s" % ("1" * 40): (200, {}, json.dumps([
            {"type": "file", "path": "../escape", "size": 1, "oid": "1" * 40},
            {"type": "file", "path": "x", "size": -1, "oid": "1" * 40},
            {"type": "file", "path": "y", "size": 1, "oid": "1" * 40, "lfs": {"oid": "nope"}},
            {"type": "submodule", "path": "z"}, "junk",
            {"type": "directory", "path": "d", "oid": "2" * 40}]).encode()),
    })
    hub = hub_api.Hub(endpoint)
    with pytest.raises(hub_api.HubError, match="not JSON"):
        hub.revision("a/b", "main")
    with pytest.raises(hub_api.HubError, match="names no commit"):
        hub.revision("a/c", "main")
    with pytest.raises(hub_api.HubError, match="another origin"):
        hub.tree("a/d", "1" * 40)
    files, refused = hub_api.file_entries(hub.tree("a/e", "1" * 40))
    # Names are the local check's business (model_files refuses "../escape"); malformed entries are refused here.
    assert list(files) == ["../escape"] and len(refused) == 4


# The JSON before the path is 27 characters: these paddings put the token across the 200th character.
@pytest.mark.parametrize("pad", [160, 166, 172])
def test_a_refused_entry_is_masked_before_it_is_cut(pad):
    """A malformed tree entry that carries the token where the 200-character cut falls: masked first, no part of the
    token survives (cut first, the masking would not find the whole token)."""
    token = "hf_SECRETTOKEN0123456789"
    entry = {"type": "file", "path": "x" * pad + token, "size": "not a number"}
    files, refused = hub_api.file_entries([entry], token)
    assert files == {} and len(refused) == 1
    assert all(token[:length] not in refused[0] for length in range(6, len(token) + 1)), refused[0]
