# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_files: a model directory against a revision's files or its own index, on hostile input too."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import model_files
from ansible_collections.llmops.serving.tests.support.hf_hub import MODEL_COMMIT, MODEL_REPO, model, repos

SHARD = "model-00002-of-00004.safetensors"


@contextlib.contextmanager
def deadline(seconds):
    """Fail instead of hanging (a FIFO opened for reading without O_NONBLOCK would block forever)."""
    def expired(signum, frame):  # pylint: disable=unused-argument
        raise AssertionError("blocked for more than %d s" % seconds)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def revision(tmp_path):
    """(model directory with the stand-in revision's files, the hub's expected entries for them)."""
    root = str(tmp_path / "root")
    model.write_model(root)
    commit = repos.Hub(root).repos[MODEL_REPO].resolve("main")
    directory = str(tmp_path / "model")
    shutil.copytree(os.path.join(root, *MODEL_REPO.split("/"), "commits", MODEL_COMMIT), directory)
    os.makedirs(os.path.join(directory, ".cache", "huggingface", "download"))
    for name in commit.files:
        with open(os.path.join(directory, ".cache", "huggingface", "download", name + ".metadata"), "w",
                  encoding="utf-8") as handle:
            handle.write("%s\n%s\n1764000000.0\n" % (MODEL_COMMIT, commit.files[name].etag))
    expected = {name: {"size": repo_file.size, "blob_id": repo_file.blob_id, "sha256": repo_file.lfs_sha256}
                for name, repo_file in commit.files.items()}
    return directory, expected


def path_in(directory, name):
    return os.path.join(directory, *name.split("/"))


@pytest.mark.parametrize("name", ["", "..", "../x", "a/../b", "/etc/passwd", "a//b", "./a", "a\\b", "a\nb",
                                  "a\x07b", "a\x00b", "weights/.."])
def test_unsafe_names_are_refused_without_touching_the_disk(name):
    assert model_files.name_error(name)


def test_a_complete_revision_is_complete_and_hashes_are_cached_until_a_file_changes(revision):
    directory, expected = revision
    first = model_files.check(directory, expected)
    assert (first["missing"], first["wrong_size"], first["damaged"], first["not_regular"]) == ([], [], [], [])
    assert first["hashing"]["hashed_files"] == len(expected) and first["download_bytes"] == 0
    assert first["present_bytes"] == first["expected_bytes"] == sum(entry["size"] for entry in expected.values())
    assert model_files.problems(first, True) == []
    second = model_files.check(directory, expected)
    assert second["hashing"] == {"hashed_files": 0, "hashed_bytes": 0, "cached_files": len(expected)}
    # Damage that keeps the size and even the modification time: the change time still moves, so it is hashed again.
    shard = path_in(directory, SHARD)
    before = os.stat(shard)
    with open(shard, "r+b") as handle:
        handle.seek(4096)
        byte = handle.read(1)
        handle.seek(4096)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    third = model_files.check(directory, expected)
    assert third["hashing"]["hashed_files"] == 1
    assert [entry["path"] for entry in third["damaged"]] == [SHARD]
    assert third["damaged"][0]["algorithm"] == "sha256" and third["damaged"][0]["expected"] == expected[SHARD]["sha256"]
    assert third["remove"] == [shard, path_in(directory, ".cache/huggingface/download/%s.metadata" % SHARD)]
    assert third["download_bytes"] == third["reclaimable_bytes"] == expected[SHARD]["size"]


def test_missing_wrong_size_and_git_hashed_files(revision):
    directory, expected = revision
    os.remove(path_in(directory, "model-00004-of-00004.safetensors"))
    with open(path_in(directory, "config.json"), "ab") as handle:
        handle.write(b" ")
    with open(path_in(directory, "vocab.json"), "r+b") as handle:
        handle.write(b"X")
    result = model_files.check(directory, expected)
    assert result["missing"] == ["model-00004-of-00004.safetensors"]
    assert result["wrong_size"] == [{"path": "config.json", "size": expected["config.json"]["size"] + 1,
                                     "expected_size": expected["config.json"]["size"]}]
    assert [(entry["path"], entry["algorithm"]) for entry in result["damaged"]] == [("vocab.json", "git-blob-sha1")]
    assert result["missing_shards"] == ["model-00004-of-00004.safetensors"]
    sentences = model_files.problems(result, True)
    assert any("vocab.json is damaged" in sentence for sentence in sentences)


def test_size_mode_reads_headers_not_hashes(revision):
    directory, expected = revision
    with open(path_in(directory, SHARD), "r+b") as handle:
        handle.seek(8)
        handle.write(b"not json")
    result = model_files.check(directory, expected, verify="size")
    assert result["hashing"]["hashed_files"] == 0
    assert [entry["path"] for entry in result["safetensors_problems"]] == [SHARD]
    assert path_in(directory, SHARD) in result["remove"]


def test_check_without_a_hub_names_the_missing_and_truncated_shards(revision):
    directory, _expected = revision
    os.remove(path_in(directory, "model-00001-of-00004.safetensors"))
    with open(path_in(directory, "model-00003-of-00004.safetensors"), "r+b") as handle:
        handle.truncate(1000)
    result = model_files.check(directory)
    assert result["files"] == 5 and result["weights"] == "sharded"
    assert result["missing"] == ["model-00001-of-00004.safetensors"] == result["missing_shards"]
    assert [entry["path"] for entry in result["safetensors_problems"]] == ["model-00003-of-00004.safetensors"]
    assert result["safetensors_problems"][0]["problem"].startswith("announces a ")
    assert result["remove"] == []  # nothing is removed without a revision to download again
    assert any("names shards that are not here: model-00001" in s for s in model_files.problems(result, False))


def test_a_shard_missing_tensors_the_index_puts_in_it(revision):
    directory, _expected = revision
    index_path = path_in(directory, model_files.INDEX)
    with open(index_path, encoding="utf-8") as handle:
        index = json.load(handle)
    index["weight_map"]["model.language_model.layers.99.mlp.up_proj.weight"] = SHARD
    with open(index_path, "w", encoding="utf-8") as handle:
        json.dump(index, handle)
    result = model_files.check(directory)
    lacks = "lacks 1 tensor(s) the index puts in it, e.g. model.language_model.layers.99.mlp.up_proj.weight"
    assert result["safetensors_problems"] == [{"path": SHARD, "problem": lacks}]


def test_no_weights_at_all_is_reported_not_failed(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    result = model_files.check(str(directory))
    assert result["weights"] == "none" and result["missing"] == [] and model_files.problems(result, False) == []
    (directory / "model.safetensors").write_bytes(model.safetensors_file([model.bf16_tensor("w", (4,))]))
    assert model_files.check(str(directory))["weights"] == "single"


def test_hostile_entries_in_the_directory(revision, tmp_path):
    directory, expected = revision
    outside = tmp_path / "outside-secret"
    outside.write_bytes(b"x" * expected["config.json"]["size"])
    os.remove(path_in(directory, "config.json"))
    os.symlink(str(outside), path_in(directory, "config.json"))
    os.remove(path_in(directory, SHARD))
    os.mkfifo(path_in(directory, SHARD))
    os.remove(path_in(directory, "tokenizer.json"))
    os.mkdir(path_in(directory, "tokenizer.json"))
    # A symlink that stays inside is followed.
    os.rename(path_in(directory, "vocab.json"), path_in(directory, "vocab.real"))
    os.symlink("vocab.real", path_in(directory, "vocab.json"))
    with deadline(20):
        result = model_files.check(directory, expected)
    problems = {entry["path"]: entry["problem"] for entry in result["not_regular"]}
    assert problems == {"config.json": "a symlink to %s, outside the model directory" % outside,
                        SHARD: "a FIFO, not a regular file",
                        "tokenizer.json": "a directory, not a regular file"}
    assert path_in(directory, "config.json") in result["remove"] and path_in(directory, SHARD) in result["remove"]
    assert path_in(directory, "tokenizer.json") not in result["remove"]
    assert "vocab.json" not in problems and not result["damaged"]
    assert outside.read_bytes() == b"x" * expected["config.json"]["size"]


def test_hostile_names_from_the_hub_and_the_index(revision, tmp_path):
    directory, expected = revision
    (tmp_path / "escaped").write_bytes(b"")
    hostile = dict(expected)
    hostile.update({"../escaped": {"size": 0, "blob_id": "0" * 40, "sha256": None},
                    "/etc/passwd": {"size": 1, "blob_id": "0" * 40, "sha256": None},
                    "bell\x07.json": {"size": 1, "blob_id": "0" * 40, "sha256": None}})
    index_path = path_in(directory, model_files.INDEX)
    with open(index_path, encoding="utf-8") as handle:
        index = json.load(handle)
    index["weight_map"]["evil"] = "../../etc/shadow"
    with open(index_path, "w", encoding="utf-8") as handle:
        json.dump(index, handle)
    result = model_files.check(directory, hostile, verify="size")
    assert sorted(result["unsafe_names"]) == sorted([
        "../../etc/shadow (in model.safetensors.index.json's weight_map) has an empty, '.' or '..' part",
        "../escaped (in the hub's list) has an empty, '.' or '..' part",
        "/etc/passwd (in the hub's list) is an absolute path or has a backslash",
        "bell\\x07.json (in the hub's list) contains a control character"])
    assert all("\x07" not in sentence for sentence in model_files.problems(result, True))


@pytest.mark.parametrize("content,error", [
    (b"{not json", "is not JSON"),
    (b'{"weight_map": ["a"]}', "has no weight_map"),
    (b"\xff\xfe", "is not JSON"),
])
def test_an_unreadable_index_is_named(tmp_path, content, error):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / model_files.INDEX).write_bytes(content)
    result = model_files.check(str(tmp_path))
    assert error in result["index"]["error"] and result["index"]["present"]


def test_a_huge_index_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(model_files, "MAX_INDEX_BYTES", 1024)
    (tmp_path / model_files.INDEX).write_bytes(b" " * 2048)
    result = model_files.check(str(tmp_path))
    assert "more than the 1024 this check reads" in result["index"]["error"]


def test_a_header_larger_than_its_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")
    info = os.stat(str(path))
    problem = model_files.safetensors_problem(model_files.ModelDir(str(tmp_path)), str(path), info)
    assert problem == "announces a 1000000-byte header in a 10-byte file"


def test_the_hash_cache_is_ignored_when_hostile_and_never_written_through_a_symlink(revision, tmp_path):
    directory, expected = revision
    cache_dir = path_in(directory, ".cache/llmops")
    os.makedirs(cache_dir)
    cache_file = os.path.join(cache_dir, "hashes.json")
    # A cache claiming every file's hash for any stat is ignored unless its stat key matches.
    forged = {"version": 1,
              "files": {name: {"stat": [0, 0, 0, 0, 0], "algorithm": "sha256", "digest": "0"} for name in expected}}
    with open(cache_file, "w", encoding="utf-8") as handle:
        json.dump(forged, handle)
    assert model_files.check(directory, expected)["hashing"]["hashed_files"] == len(expected)
    with open(cache_file, "w", encoding="utf-8") as handle:
        handle.write("{broken")
    assert model_files.check(directory, expected, write_cache=False)["hashing"]["cached_files"] == 0
    shutil.rmtree(cache_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), cache_dir)
    model_files.check(directory, expected)
    assert os.listdir(str(elsewhere)) == []


def test_check_mode_writes_no_cache(revision):
    directory, expected = revision
    model_files.check(directory, expected, write_cache=False)
    assert not os.path.exists(path_in(directory, ".cache/llmops"))


def test_partial_downloads_are_counted_and_planned_for_removal(revision, tmp_path):
    directory, expected = revision
    download = path_in(directory, ".cache/huggingface/download")
    with open(os.path.join(download, "abc.etag.1234abcd.incomplete"), "wb") as handle:
        handle.write(b"x" * 1000)
    os.mkfifo(os.path.join(download, "fifo.incomplete"))
    result = model_files.check(directory, expected)
    assert result["incomplete"] == {"files": [{"path": os.path.join(download, "abc.etag.1234abcd.incomplete"),
                                               "size": 1000}], "bytes": 1000}


def test_a_directory_that_does_not_exist_yet(tmp_path):
    result = model_files.check(str(tmp_path / "not-yet"), {"config.json": {"size": 2, "blob_id": "0" * 40,
                                                                           "sha256": None}})
    assert result["missing"] == ["config.json"] and result["download_bytes"] == 2
    free, measured = model_files.free_space(str(tmp_path / "not-yet" / "deeper"))
    assert measured == str(tmp_path) and free > 0


def test_a_cache_directory_symlinked_elsewhere_plans_nothing_outside_for_removal(revision, tmp_path):
    """root deletes what `remove` lists: a .cache (or .cache/huggingface) that is a symlink out of the directory must
    not put the files it leads to there (neither partial downloads nor the records of a damaged file)."""
    directory, expected = revision
    elsewhere = tmp_path / "elsewhere"
    shutil.move(path_in(directory, ".cache"), str(elsewhere))
    os.symlink(str(elsewhere), path_in(directory, ".cache"))
    with open(os.path.join(str(elsewhere), "huggingface", "download", "x.incomplete"), "wb") as handle:
        handle.write(b"x" * 10)
    with open(path_in(directory, "vocab.json"), "r+b") as handle:
        handle.write(b"X")
    result = model_files.check(directory, expected, write_cache=False)
    assert [entry["path"] for entry in result["damaged"]] == ["vocab.json"]
    assert result["incomplete"] == {"files": [], "bytes": 0}
    assert result["remove"] and not [path for path in result["remove"] if str(elsewhere) in os.path.realpath(path)]
    # The same layout without the symlink plans the record beside the file (what the check protects is real).
    os.unlink(path_in(directory, ".cache"))
    shutil.move(str(elsewhere), path_in(directory, ".cache"))
    result = model_files.check(directory, expected, write_cache=False)
    assert path_in(directory, ".cache/huggingface/download/vocab.json.metadata") in result["remove"]
    assert [entry["path"] for entry in result["incomplete"]["files"]] == [
        path_in(directory, ".cache/huggingface/download/x.incomplete")]
