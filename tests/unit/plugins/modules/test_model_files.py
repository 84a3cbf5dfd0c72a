# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model_files module against the Hub stand-in, with directories the real `hf download` wrote."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.modules import model_files
from ansible_collections.llmops.serving.tests.support import hf_hub as support
from ansible_collections.llmops.serving.tests.support.hf_hub import MODEL_COMMIT, MODEL_REPO, repos
from ansible_collections.llmops.serving.tests.unit.fakes import across_cut, echoed_forms, key_windows_shown, random_key
from ansible_collections.llmops.serving.tests.unit.module_runner import run_module

SHARD = "model-00003-of-00004.safetensors"
GRANTED = "hf_standin_granted_token"
TOKENS = {GRANTED: {"user": "granted", "access": ["llmops-standin/gated"]}}


def plan(hub, path, check_mode=False, **args):
    return run_module(model_files.main, dict({"path": path, "repo": MODEL_REPO, "revision": "main",
                                              "endpoint": hub.endpoint}, **args), check_mode=check_mode)


def test_a_fresh_directory_plans_the_whole_revision(hf_hub, tmp_path):
    hub = hf_hub()
    result, failed = plan(hub, str(tmp_path / "model"))
    assert not failed and not result["changed"] and not result["complete"]
    assert result["commit"] == MODEL_COMMIT and result["gated"] is False and result["files"] == 13
    assert result["download_bytes"] == result["expected_bytes"] > 1 << 20
    assert result["disk"]["enough"] and result["disk"]["path"] == str(tmp_path)
    assert result["disk"]["needed_bytes"] == result["download_bytes"] + (1 << 30)
    assert result["message"].startswith("Qwen/Qwen3.6-27B at 0123456789ab (main): 13 of 13 files to download")


def test_a_damaged_download_is_found_and_the_redownload_is_complete(hf_hub, tmp_path):
    hub = hf_hub(faults={"damage": {SHARD: 12345}})
    target = str(tmp_path / "model")
    done = hub.hf_download(MODEL_REPO, target, revision="main")
    assert done.returncode == 0, done.stderr  # the client checks only the size
    result, failed = plan(hub, target)
    assert not failed and not result["complete"]
    assert [entry["path"] for entry in result["damaged"]] == [SHARD]
    metadata = os.path.join(target, ".cache", "huggingface", "download", SHARD + ".metadata")
    assert result["remove"] == [os.path.join(target, SHARD), metadata]
    assert "%s is damaged: its sha256 is" % SHARD in result["message"]
    assert result["hashing"]["hashed_files"] == 13
    # What the role does: remove what is in the way and download again, this time intact.
    for path in result["remove"]:
        os.remove(path)
    hub.set_faults({})
    done = hub.hf_download(MODEL_REPO, target, revision=MODEL_COMMIT)
    assert done.returncode == 0, done.stderr
    again, _failed = plan(hub, target)
    assert again["complete"] and again["download_bytes"] == 0 and again["remove"] == []
    assert again["hashing"] == {"hashed_files": 1, "hashed_bytes": os.path.getsize(os.path.join(target, SHARD)),
                                "cached_files": 12}
    assert again["message"].endswith("all 13 files present and hashed (2.9 MiB; 1 hashed now, 12 from the hash cache)")


def test_check_mode_writes_nothing(hf_hub, tmp_path):
    hub = hf_hub()
    target = str(tmp_path / "model")
    assert hub.hf_download(MODEL_REPO, target).returncode == 0
    result, _failed = plan(hub, target, check_mode=True)
    assert result["complete"] and not os.path.exists(os.path.join(target, ".cache", "llmops"))


def test_not_enough_space_is_reported_with_the_numbers(hf_hub, tmp_path):
    hub = hf_hub()
    result, _failed = plan(hub, str(tmp_path / "model"), reserve_bytes=1 << 60)
    assert not result["disk"]["enough"]
    assert "free on %s" % tmp_path in result["message"]
    assert "needed (with 1073741824.0 GiB reserve)" in result["message"]


def test_the_hubs_refusals_fail_with_the_reason_and_never_the_token(hf_hub, tmp_path):
    root = support.make_root(str(tmp_path / "root"), TOKENS)
    repos.write_repo(root, "llmops-standin/gated", {"2" * 40: {"config.json": b"{}\n"}}, gated="manual")
    hub = hf_hub(root=root)
    target = str(tmp_path / "model")
    cases = [
        ({"repo": "nobody/nothing"}, "repo_not_found", "repository nobody/nothing was not found"),
        ({"revision": "nope"}, "revision_not_found", "revision 'nope' of Qwen/Qwen3.6-27B was not found"),
        ({"repo": "llmops-standin/gated"}, "gated", "llmops-standin/gated is gated: give a token"),
        ({"token": "hf_not_a_token_secret"}, "invalid_token", "refused the token"),
    ]
    for args, kind, message in cases:
        result, failed = plan(hub, target, **args)
        assert failed and result["hub_error"] == kind and message in result["msg"], result
        assert "hf_not_a_token_secret" not in json.dumps(result)
    result, failed = plan(hub, target, repo="llmops-standin/gated", token=GRANTED)
    assert not failed and result["gated"] == "manual" and GRANTED not in json.dumps(result)


@pytest.mark.parametrize("args,message", [
    ({"repo": "../etc"}, "is not a Hugging Face repository ID"),
    ({"endpoint": "file:///etc"}, "is not an http(s) URL"),
    ({"revision": ""}, "revision must not be empty"),
    ({"reserve_bytes": -1}, "reserve_bytes must be >= 0"),
])
def test_inputs_it_refuses(tmp_path, args, message):
    result, failed = run_module(model_files.main, dict({"path": str(tmp_path), "repo": MODEL_REPO,
                                                        "endpoint": "http://127.0.0.1:9"}, **args))
    assert failed and message in result["msg"]


def test_without_a_hub_the_missing_shards_are_named(hf_hub, tmp_path):
    hub = hf_hub()
    target = str(tmp_path / "model")
    assert hub.hf_download(MODEL_REPO, target).returncode == 0
    os.remove(os.path.join(target, "model-00002-of-00004.safetensors"))
    os.mkfifo(os.path.join(target, "model-00004-of-00004.safetensors.tmp"))
    os.replace(os.path.join(target, "model-00004-of-00004.safetensors.tmp"),
               os.path.join(target, "model-00004-of-00004.safetensors"))
    result, failed = run_module(model_files.main, {"path": target})
    assert not failed and not result["complete"] and result["commit"] is None
    assert result["missing_shards"] == ["model-00002-of-00004.safetensors", "model-00004-of-00004.safetensors"]
    assert result["not_regular"] == [{"path": "model-00004-of-00004.safetensors",
                                      "problem": "a FIFO, not a regular file"}]
    assert "model.safetensors.index.json names shards that are not here: model-00002-of-00004.safetensors, " \
           "model-00004-of-00004.safetensors" in result["message"]
    assert [len(run_module(model_files.main, {"path": target}, check_mode=True)[0]["problems"])] == [3]


# -- a hub that echoes the token --------------------------------------------------------------------------------------

PEER_TOKEN = random_key(5, prefix="hf_", length=34)
FORMS = echoed_forms(PEER_TOKEN)
# Forms a header value can carry (no line break) and forms a JSON string can (no raw line break either).
ONE_LINE_FORMS = sorted(name for name, form in FORMS.items() if "\n" not in form)
# Where the echoed token starts: well before the module's cut, or so many characters before it (-4: all but its last 4).
PLACES = [None, 7, 13, -4]
REVISION_PATH = "/api/models/a/b/revision/main"


def _place(form, place):
    return len(form) + place if place is not None and place < 0 else place


def _plan_against(hostile, tmp_path, answers):
    _server, endpoint = hostile(answers)
    return run_module(model_files.main, {"path": str(tmp_path / "model"), "repo": "a/b", "revision": "main",
                                         "endpoint": endpoint, "token": PEER_TOKEN, "timeout": 5})


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", ONE_LINE_FORMS)
def test_a_token_echoed_in_the_hubs_error_header_comes_back_in_no_form(hostile, tmp_path, form, place):
    said = across_cut(FORMS[form], 500, _place(FORMS[form], place), prefix="Invalid token ", suffix=" for a/b")
    result, failed = _plan_against(hostile, tmp_path, {REVISION_PATH: (
        404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": said}, b"{}")})
    assert failed and result["hub_error"] == "repo_not_found" and "the hub said" in result["msg"]
    assert not key_windows_shown(PEER_TOKEN, result), result["msg"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", ONE_LINE_FORMS)
def test_a_token_echoed_in_the_hubs_json_error_comes_back_in_no_form(hostile, tmp_path, form, place):
    # The body's JSON text carries the form: the error the hub said is what a JSON parser reads from it.
    said = across_cut(FORMS[form], 500, _place(FORMS[form], place), prefix="bad token ", suffix=" (a/b)")
    body = ('{"error": "%s"}' % said).encode("utf-8")
    result, failed = _plan_against(hostile, tmp_path, {REVISION_PATH: (500, {}, body)})
    assert failed and result["hub_error"] == "http" and "the hub said" in result["msg"]
    assert not key_windows_shown(PEER_TOKEN, result), result["msg"]


@pytest.mark.parametrize("form", ["plain", "url_encoded", "url_encoded_lower_hex"])
def test_a_token_echoed_in_a_redirect_to_another_origin_comes_back_in_no_form(hostile, tmp_path, form):
    # The forms a URL carries: "+", "/" and "=" are allowed as they are in a query.
    location = "http://127.0.0.2:9/login?token=" + FORMS[form]
    result, failed = _plan_against(hostile, tmp_path, {REVISION_PATH: (302, {"Location": location}, b"")})
    assert failed and "redirects to another origin" in result["msg"]
    assert not key_windows_shown(PEER_TOKEN, result), result["msg"]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_token_echoed_in_a_file_name_comes_back_in_no_form(hostile, tmp_path, form, place):
    commit = "1" * 40
    path = across_cut(FORMS[form], 200, _place(FORMS[form], place), prefix="weights/", suffix=".safetensors")
    tree = [{"type": "file", "path": "config.json", "size": 2, "oid": "2" * 40},
            {"type": "file", "path": path, "size": 3, "oid": "3" * 40}]
    result, failed = _plan_against(hostile, tmp_path, {
        REVISION_PATH: (200, {}, json.dumps({"sha": commit}).encode()),
        "/api/models/a/b/tree/" + commit: (200, {}, json.dumps(tree).encode()),
        "/a/b/resolve/%s/config.json" % commit: (200, {}, b"")})
    assert not failed, result["msg"]
    assert result["missing"] == ["config.json"] and "carries the token" in result["message"]
    assert not key_windows_shown(PEER_TOKEN, result), result["message"]
