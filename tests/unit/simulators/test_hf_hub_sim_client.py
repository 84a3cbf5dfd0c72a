# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The REAL `hf download` of the pinned huggingface_hub against the Hub stand-in on 127.0.0.1: a full download, a
transfer cut midway that the client resumes with Range, a killed download that a rerun completes, and the refusals
as the client reports them."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess

import pytest

from ansible_collections.llmops.serving.tests.support import hf_hub as support
from ansible_collections.llmops.serving.tests.support.hf_hub import MODEL_COMMIT, MODEL_REPO, model, repos
from ansible_collections.llmops.serving.tests.support.waiting import wait_until

GRANTED = "hf_standin_granted_token"
READER = "hf_standin_reader_token"
TOKENS = {GRANTED: {"user": "granted", "access": ["llmops-standin/gated"]}, READER: {"user": "reader", "access": []}}
BIG = "llmops-standin/big"
BIG_COMMIT = "5" * 40
MIB = 1 << 20


def tree_bytes(directory):
    """{relative path: sha256} of the files under a directory, .cache left out."""
    found = {}
    for current, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if d != ".cache"]
        for name in names:
            path = os.path.join(current, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, directory)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def served_root(hub):
    return hub.root


def with_big_repo(tmp_path, tokens=None):
    """The stand-in model plus a repository whose weights exceed the client's 10 MiB download chunk (it resumes
    only from whole chunks) and a gated one."""
    root = support.make_root(str(tmp_path / "root"), tokens or TOKENS)
    repos.write_repo(root, BIG, {BIG_COMMIT: {
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        "config.json": b"{}\n",
        "model.safetensors": model.tensor_bytes("big", 12 * MIB)}})
    repos.write_repo(root, "llmops-standin/gated", {"2" * 40: {
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        "config.json": b"{}\n", "model.safetensors": model.tensor_bytes("gated", 4096)}}, gated="manual")
    return root


def test_a_full_download_is_the_revision_byte_for_byte(hf_hub, tmp_path):
    hub = hf_hub()
    target = str(tmp_path / "model")
    done = hub.hf_download(MODEL_REPO, target, revision="main")
    assert done.returncode == 0, done.stdout + done.stderr
    served = os.path.join(served_root(hub), *MODEL_REPO.split("/"), "commits", MODEL_COMMIT)
    assert tree_bytes(target) == tree_bytes(served)
    metadata = os.path.join(target, ".cache", "huggingface", "download", "config.json.metadata")
    with open(metadata, encoding="utf-8") as handle:
        assert handle.readline().strip() == MODEL_COMMIT
    requests = hub.requests()
    assert {entry["path"] for entry in requests if entry["path"].startswith("/api/models/")} == {
        "/api/models/%s/revision/main" % MODEL_REPO, "/api/models/%s/tree/%s" % (MODEL_REPO, MODEL_COMMIT)}
    assert not any(entry["range"] for entry in requests)
    assert sum(1 for entry in requests if entry["listener"] == "cdn") == 5  # four shards and tokenizer.json (LFS)
    # A rerun finds every file recorded at the commit and fetches nothing.
    before = len(requests)
    again = hub.hf_download(MODEL_REPO, target, revision=MODEL_COMMIT)
    assert again.returncode == 0, again.stderr
    assert not [entry for entry in hub.requests()[before:] if entry["method"] == "GET" and "file" in entry]


def test_a_transfer_cut_midway_is_resumed_with_a_range_request(hf_hub, tmp_path):
    hub = hf_hub(root=with_big_repo(tmp_path),
                 faults={"cut_after": {"model.safetensors": 11 * MIB}, "cut_count": {"model.safetensors": 1}})
    target = str(tmp_path / "big")
    done = hub.hf_download(BIG, target, revision="main")
    assert done.returncode == 0, done.stderr
    transfers = [entry for entry in hub.requests()
                 if entry.get("file") == "model.safetensors" and entry["method"] == "GET"]
    assert [(entry["status"], entry["range"], entry.get("cut", False)) for entry in transfers] == [
        (200, None, True), (206, "bytes=%d-" % (10 * MIB), False)]
    assert tree_bytes(target)["model.safetensors"] == hashlib.sha256(model.tensor_bytes("big", 12 * MIB)).hexdigest()


def test_a_killed_download_leaves_its_partial_file_and_a_rerun_fetches_only_what_is_missing(hf_hub, tmp_path):
    # 1 MiB/s and a kill after the first MiB: the 12 MiB file is still downloading for seconds when the test looks.
    hub = hf_hub(root=with_big_repo(tmp_path), faults={"bytes_per_second": MIB})
    target = str(tmp_path / "big")
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [support.HF_CLI, "download", BIG, "--revision", "main", "--local-dir", target], env=hub.hf_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    download_dir = os.path.join(target, ".cache", "huggingface", "download")

    def partial_bytes():
        names = os.listdir(download_dir) if os.path.isdir(download_dir) else []
        return sum(os.path.getsize(os.path.join(download_dir, n)) for n in names if n.endswith(".incomplete"))

    try:
        wait_until(lambda: partial_bytes() >= MIB, 60, "1 MiB of the weights in a .incomplete file")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert os.path.exists(os.path.join(target, "config.json"))
    assert not os.path.exists(os.path.join(target, "model.safetensors"))
    leftover = [n for n in os.listdir(download_dir) if n.endswith(".incomplete")]
    assert len(leftover) == 1
    # The server notices the killed client when its next write fails; only then is that transfer logged.
    wait_until(lambda: any(entry.get("aborted") for entry in hub.requests()), 30, "the killed transfer's end")
    hub.set_faults({})
    before = len(hub.requests())
    done = hub.hf_download(BIG, target, revision="main")
    assert done.returncode == 0, done.stderr
    fetched = [entry for entry in hub.requests()[before:] if entry["method"] == "GET" and "file" in entry]
    # huggingface_hub 2.4.0 downloads into a process-unique .incomplete file: the rerun starts the weights over (no
    # Range) and leaves the killed run's partial file where it was.
    assert [(entry["file"], entry["range"]) for entry in fetched] == [("model.safetensors", None)]
    assert leftover[0] in os.listdir(download_dir)
    assert tree_bytes(target)["model.safetensors"] == hashlib.sha256(model.tensor_bytes("big", 12 * MIB)).hexdigest()


def test_the_token_goes_to_the_hub_and_not_to_the_cdn(hf_hub, tmp_path):
    hub = hf_hub(root=with_big_repo(tmp_path))
    done = hub.hf_download("llmops-standin/gated", str(tmp_path / "gated"), token=GRANTED)
    assert done.returncode == 0, done.stderr
    # (The client's best-effort agent-harness lookup goes without a token: it names no repository.)
    auth = {(entry["listener"], entry["auth"]) for entry in hub.requests() if "agent-harnesses" not in entry["path"]}
    assert auth == {("hub", "bearer"), ("cdn", "none")}


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_the_refusals_are_reported_by_the_client_as_the_hubs(hf_hub, tmp_path, tls):
    hub = hf_hub(root=with_big_repo(tmp_path), tls=tls)
    cases = [
        ("nobody/nothing", None, None,
         "Model 'nobody/nothing' not found." if tls else "401 Unauthorized"),
        ("nobody/nothing", None, READER, "Model 'nobody/nothing' not found."),
        (MODEL_REPO, "nope", None, "Revision not found in model 'Qwen/Qwen3.6-27B'."),
        ("llmops-standin/gated", None, None, "Access denied. Model 'llmops-standin/gated' requires approval."),
        ("llmops-standin/gated", None, READER, "Access denied. Model 'llmops-standin/gated' requires approval."),
        (MODEL_REPO, None, "hf_not_a_token", "Invalid credentials in Authorization header"),
    ]
    for index, (repo, revision, token, message) in enumerate(cases):
        done = hub.hf_download(repo, str(tmp_path / ("refused-%d" % index)), revision=revision, token=token)
        assert done.returncode != 0 and message in done.stdout + done.stderr, (repo, revision, done.stderr)
        for secret in (READER, "hf_not_a_token"):
            assert secret not in done.stdout + done.stderr
    if not tls:
        done = hub.hf_download("nobody/nothing", str(tmp_path / "anonymous"))
        assert "Invalid username or password." in done.stderr
