# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_router's parsers on the real sglang-router 0.3.2 answers in data/sglang_router (verbatim), and its URL check on
hostile input."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import sglang_router

DATA = pathlib.Path(__file__).parent / "data" / "sglang_router"
FIRST = "1d7213cd-0f64-4a21-8977-66b36a2a447e"
SECOND = "20349995-9bf8-4a84-9d90-47842ed3724b"
READDED = "4e0905a6-16d2-433b-9f7a-f14f97339b4e"
URL_0 = "http://127.0.0.1:31000"
URL_1 = "http://127.0.0.1:31001"


def read(name):
    return (DATA / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the captured answers

def test_every_data_file_is_covered():
    covered = {"workers-two-healthy.json", "workers-after-readd.json", "workers-one-unhealthy.json", "readiness-ready.json",
               "readiness-one-unhealthy.json", "readiness-none-healthy.json", "add-accepted.json", "delete-accepted.json",
               "delete-not-found.json", "generate-no-healthy-worker.json", "metrics.txt", "router-startup.log",
               "router-metrics-port-in-use.log", "README.md", "smg-1.13.0"}
    assert set(path.name for path in DATA.iterdir()) == covered


SMG = DATA / "smg-1.13.0"


def test_every_smg_file_is_in_its_readme_and_parses():
    readme = (SMG / "README.md").read_text(encoding="utf-8")
    for path in SMG.iterdir():
        if path.name not in ("README.md", "capture.py.txt"):
            assert "`%s`" % path.name in readme, path.name
    for name in ("workers-two-ready.json", "workers-one-draining.json", "workers-one-ready.json", "workers-after-readd.json"):
        workers = sglang_router.parse_workers((SMG / name).read_text(encoding="utf-8"))
        assert workers and all(worker["status"] in ("ready", "draining") for worker in workers)
        assert all(isinstance(worker["load"], int) for worker in workers)
    for name in ("readiness-ready.json", "readiness-while-draining.json", "readiness-no-workers.json"):
        sglang_router.parse_readiness((SMG / name).read_text(encoding="utf-8"))
    # One body of a single worker (GET /workers/{id}), wrapped as a list, is the same shape.
    draining = json.loads((SMG / "worker-by-id-draining-load.json").read_text(encoding="utf-8"))
    [parsed] = sglang_router.parse_workers(json.dumps({"workers": [draining]}))
    assert (parsed["status"], parsed["is_healthy"], parsed["load"]) == ("draining", False, 1)


def test_the_predecessor_has_no_status_so_no_draining():
    workers = sglang_router.parse_workers(read("workers-two-healthy.json"))
    assert [worker["status"] for worker in workers] == [None, None] and not sglang_router.drains(workers)


def test_two_healthy_workers():
    workers = sglang_router.parse_workers(read("workers-two-healthy.json"))
    assert workers == [
        {"id": FIRST, "url": URL_0, "is_healthy": True, "model_id": "Qwen/Qwen3.6-27B", "worker_type": "regular", "load": 0,
         "status": None},
        {"id": SECOND, "url": URL_1, "is_healthy": True, "model_id": "unknown", "worker_type": "regular", "load": 0,
         "status": None},
    ]
    assert sglang_router.compare_workers([URL_0, URL_1], workers) == {
        "missing": [], "unexpected": [], "unhealthy": [], "duplicates": []}


def test_bytes_are_parsed_like_text():
    assert (sglang_router.parse_workers((DATA / "workers-two-healthy.json").read_bytes())
            == sglang_router.parse_workers(read("workers-two-healthy.json")))


def test_after_readd():
    # The captured list after a remove and a re-add: the README's ids say which file came from which moment.
    workers = sglang_router.parse_workers(read("workers-after-readd.json"))
    assert [worker["url"] for worker in workers] == [URL_0, URL_1]
    assert all(worker["is_healthy"] for worker in workers)
    assert sglang_router.find_worker_ids(workers, URL_1) == [workers[1]["id"]]


def test_one_unhealthy_worker():
    workers = sglang_router.parse_workers(read("workers-one-unhealthy.json"))
    assert [(worker["url"], worker["is_healthy"]) for worker in workers] == [(URL_0, True), (URL_1, False)]
    assert workers[1]["id"] == READDED
    assert sglang_router.compare_workers([URL_0, URL_1], workers)["unhealthy"] == [URL_1]


def test_add_accepted_carries_the_new_id_that_the_list_then_shows():
    accepted = json.loads(read("add-accepted.json"))
    assert accepted["status"] == "accepted" and accepted["url"] == URL_1
    workers = sglang_router.parse_workers(read("workers-one-unhealthy.json"))
    assert sglang_router.find_worker_ids(workers, URL_1) == [accepted["worker_id"]]


def test_delete_answers_are_not_worker_lists():
    accepted = json.loads(read("delete-accepted.json"))
    assert accepted["worker_id"] == SECOND
    assert json.loads(read("delete-not-found.json"))["code"] == "WORKER_NOT_FOUND"
    for name in ("delete-accepted.json", "delete-not-found.json", "add-accepted.json", "generate-no-healthy-worker.json"):
        with pytest.raises(ValueError, match="'workers'"):
            sglang_router.parse_workers(read(name))


@pytest.mark.parametrize("name, expected", [
    ("readiness-ready.json", {"status": "ready", "healthy_workers": 2, "total_workers": 2, "reason": None}),
    ("readiness-one-unhealthy.json", {"status": "ready", "healthy_workers": 1, "total_workers": 2, "reason": None}),
    ("readiness-none-healthy.json", {"status": "not ready", "healthy_workers": None, "total_workers": None,
                                     "reason": "insufficient healthy workers"}),
])
def test_readiness(name, expected):
    assert sglang_router.parse_readiness(read(name)) == expected


@pytest.mark.parametrize("name", ["metrics.txt", "router-startup.log", "router-metrics-port-in-use.log", "README.md"])
def test_text_files_are_neither_lists_nor_readiness(name):
    with pytest.raises(ValueError, match="not JSON"):
        sglang_router.parse_workers(read(name))
    with pytest.raises(ValueError, match="not JSON"):
        sglang_router.parse_readiness(read(name))


def test_other_json_is_not_readiness():
    with pytest.raises(ValueError, match="status"):
        sglang_router.parse_readiness(read("generate-no-healthy-worker.json"))
    with pytest.raises(ValueError, match="status"):
        sglang_router.parse_readiness(read("workers-two-healthy.json"))


# --------------------------------------------------------------------------- broken answers

def test_truncated_json():
    text = read("workers-two-healthy.json")
    with pytest.raises(ValueError, match="not JSON"):
        sglang_router.parse_workers(text[:len(text) // 2])
    with pytest.raises(ValueError, match="not JSON"):
        sglang_router.parse_readiness(read("readiness-ready.json")[:20])


@pytest.mark.parametrize("body, message", [
    ('{"workers": {"a": 1}}', "'workers' is a dict, not a list"),
    ('{"total": 0}', "no 'workers' key"),
    ('[]', "not a JSON object"),
    ('', "not JSON"),
    ('{"workers": ["http://h:1"]}', r"workers\[0\] is a str"),
    ('{"workers": [{"id": "a", "is_healthy": true}]}', r"workers\[0\] has no string 'url'"),
    ('{"workers": [{"id": "a", "url": 5, "is_healthy": true}]}', r"workers\[0\] has no string 'url'"),
    ('{"workers": [{"url": "http://h:1", "is_healthy": true}]}', r"workers\[0\] has no string 'id'"),
    ('{"workers": [{"id": "a", "url": "http://h:1", "is_healthy": "true"}]}', r"workers\[0\] \(http://h:1\) has an 'is_healthy'"),
    ('{"workers": [{"id": "a", "url": "http://h:1", "is_healthy": 1}]}', "is_healthy"),
    ('{"workers": [{"id": "a", "url": "http://h:1"}]}', "is_healthy"),
])
def test_broken_worker_lists(body, message):
    with pytest.raises(ValueError, match=message):
        sglang_router.parse_workers(body)


def test_non_text_is_refused():
    with pytest.raises(ValueError, match="not text"):
        sglang_router.parse_workers(None)


@pytest.mark.parametrize("body", ['{"status": 1}', '{"status": "ready", "healthy_workers": "2"}',
                                  '{"status": "ready", "total_workers": true}', '{"status": "ready", "healthy_workers": -1}',
                                  '"ready"', '{"status": "not ready", "reason": 3}'])
def test_broken_readiness(body):
    with pytest.raises(ValueError):
        sglang_router.parse_readiness(body)


def test_empty_worker_list():
    assert sglang_router.parse_workers('{"workers":[],"total":0,"stats":{}}') == []


# --------------------------------------------------------------------------- comparing

def worker(url, healthy=True, worker_id=None):
    return {"id": worker_id or url, "url": url, "is_healthy": healthy, "model_id": None, "worker_type": "regular", "load": 0,
            "status": None}


def test_compare_names_each_kind_of_difference():
    workers = [worker(URL_0), worker("http://10.0.0.5:31002", healthy=False), worker("http://10.0.0.9:31009"),
               worker("http://10.0.0.9:31009/", worker_id="again")]
    assert sglang_router.compare_workers([URL_0, "http://10.0.0.5:31002", URL_1], workers) == {
        "missing": [URL_1],
        "unexpected": ["http://10.0.0.9:31009"],
        "unhealthy": ["http://10.0.0.5:31002"],
        "duplicates": ["http://10.0.0.9:31009"],
    }
    assert sglang_router.find_worker_ids(workers, "HTTP://10.0.0.9:31009") == ["http://10.0.0.9:31009", "again"]
    assert sglang_router.find_worker_ids(workers, URL_1) == []


def test_compare_is_sorted_and_case_blind_in_scheme_and_host():
    workers = [worker("http://B.example:1"), worker("http://a.example:1")]
    assert sglang_router.compare_workers(["HTTP://b.EXAMPLE:1/", "http://c.example:1", "http://0.example:1"], workers) == {
        "missing": ["http://0.example:1", "http://c.example:1"], "unexpected": ["http://a.example:1"], "unhealthy": [],
        "duplicates": []}


@pytest.mark.parametrize("url, normalized", [
    ("http://127.0.0.1:31000", "http://127.0.0.1:31000"),
    ("http://127.0.0.1:31000/", "http://127.0.0.1:31000"),
    ("HTTPS://Worker-1.Example.COM:443/", "https://worker-1.example.com:443"),
    ("http://[FE80::1]:8000", "http://[fe80::1]:8000"),
])
def test_normalize(url, normalized):
    assert sglang_router.normalize_worker_url(url) == normalized
    assert sglang_router.normalize_worker_url(normalized) == normalized


# --------------------------------------------------------------------------- worker URLs

@pytest.mark.parametrize("url", [
    "http://127.0.0.1:31000", "http://127.0.0.1:31000/", "https://worker-1.example.com:443", "http://localhost:1",
    "http://[::1]:30000", "http://[2001:db8::7]:65535/", "HTTP://Node-7.LAN:8080", "http://a" + ".b" * 100 + ":1",
])
def test_acceptable_worker_urls(url):
    assert sglang_router.worker_url_error(url) is None


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:31000\n", "whitespace"),
    ("http://127.0.0.1:31000\nExecStartPre=/bin/sh -c id", "whitespace"),
    ("http://127.0.0.1:31000\r", "whitespace"),
    ("http://127.0.0.1:\t31000", "whitespace"),
    ("http://127.0.0.1:31000 http://evil:1", "whitespace"),
    ("http://127.0.0.1:31000\x00", "control character"),
    ("http://127.0.0.1:31000\x7f", "control character"),
    ("http://127.0.0.1:31000\x1b[2J", "control character"),
    ("http://wörker:1", "non-ASCII"),
    ("http://user:pass@127.0.0.1:31000", "user information"),
    ("http://user@127.0.0.1:31000", "user information"),
    ("http://127.0.0.1:31000?x=1", "query"),
    ("http://127.0.0.1:31000/?x=1", "query"),
    ("http://127.0.0.1:31000#top", "fragment"),
    ("http://127.0.0.1:31000/v1", "path"),
    ("http://127.0.0.1:31000//", "path"),
    ("http://127.0.0.1", "no port"),
    ("http://127.0.0.1/", "no port"),
    ("http://127.0.0.1:", "no port"),
    ("http://[::1]", "no port"),
    ("http://[::1]:", "no port"),
    ("http://127.0.0.1:0", "port 0,"),
    ("http://127.0.0.1:65536", "port 65536"),
    ("http://127.0.0.1:031000", "leading zeros"),
    ("http://127.0.0.1:-1", "port -1"),
    ("http://127.0.0.1:80a", "port 80a"),
    ("ftp://127.0.0.1:21", "scheme ftp"),
    ("file:///etc/passwd", "scheme file"),
    ("127.0.0.1:31000", "not an absolute URL"),
    ("//127.0.0.1:31000", "not an absolute URL"),
    ("", "empty"),
    ("http://:31000", "no host"),
    ("http://", "no host"),
    ("http://::1:31000", "IPv6 address without brackets"),
    ("http://fe80::1:31000", "IPv6 address without brackets"),
    ("http://[::1:31000", "closing bracket"),
    ("http://[fe80::1%eth0]:31000", "zone index"),
    ("http://[127.0.0.1]:31000", "not an IPv6 address"),
    ("http://[::1]x:31000", "no port"),
    ("http://256.0.0.1:31000", "not a valid IPv4"),
    ("http://1.2.3:31000", "not a valid IPv4"),
    ("http://-worker:31000", "not a DNS name"),
    ("http://work_er:31000", "not a DNS name"),
    ("http://a..b:31000", "not a DNS name"),
    ("http://host.123:31000", "last label is a number"),
    ("http://" + "a" * 64 + ":1", "not a DNS name"),
    ("http://" + "a." * 130 + "b:1", "longer than 253"),
    ("http://127.0.0.1:31000/" + "a" * 3000, "longer than 2048"),
    ("http://" + "a" * 3000 + ":1", "longer than 2048"),
])
def test_refused_worker_urls(url, message):
    error = sglang_router.worker_url_error(url)
    assert error is not None and message in error, error
    assert "\n" not in error and "\r" not in error and "\x00" not in error


@pytest.mark.parametrize("value", [None, 31000, b"http://127.0.0.1:31000", ["http://127.0.0.1:31000"], {"url": "x"}])
def test_non_strings_are_refused(value):
    assert sglang_router.worker_url_error(value) == "is not a string"


def test_the_message_never_repeats_a_long_url():
    url = "http://127.0.0.1:" + "9" * 2000
    assert len(sglang_router.worker_url_error(url)) < 100
