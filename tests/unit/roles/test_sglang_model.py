# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang role's model steps (tasks/model-plan.yml, tasks/model.yml) run by ansible-playbook on this machine
(connection local) with the REAL `hf download` of the project's virtualenv against the Hub stand-in on 127.0.0.1:
the plan, the download with its progress lines, the check after it, a damaged file replaced on the next run, a
download stopped by its time limit and completed by the next run, a pre-staged directory missing a shard (and a whole
one, and none), a download that does not fit, check mode, and the token in no output, log or command line."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys

from ansible_collections.llmops.serving.tests.support import hf_hub as support
from ansible_collections.llmops.serving.tests.support.hf_hub import MODEL_COMMIT, MODEL_REPO, model, repos
from ansible_collections.llmops.serving.tests.support.waiting import wait_until
from ansible_collections.llmops.serving.tests.unit.roles.templar import REPO, render

GATED = "llmops-standin/qwen-gated"
TOKEN = "hf_standin_token_0123456789secret"
SHARD = "model-00003-of-00004.safetensors"
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: llmops.serving.sglang
        tasks_from: inputs
    - ansible.builtin.include_role:
        name: llmops.serving.sglang
        tasks_from: model-plan
    - ansible.builtin.include_role:
        name: llmops.serving.sglang
        tasks_from: model
    - name: Show the revision
      ansible.builtin.debug:
        var: sglang_model_revision
"""


def gated_root(tmp_path):
    """The stand-in model, and a gated copy of it that only TOKEN may download."""
    root = support.make_root(str(tmp_path / "root"), {TOKEN: {"user": "operator", "access": [GATED]}})
    repos.write_repo(root, GATED, {MODEL_COMMIT: model.model_files()}, gated="manual")
    return root


FACTS_FIRST = """
    - ansible.builtin.include_role:
        name: llmops.serving.sglang
        tasks_from: facts
"""


def role_command(tmp_path, hub, check=False, verbosity=0, facts_first=False, **variables):
    """(argv, environment) of one ansible-playbook run of the model steps on this machine."""
    host = dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "sglang_model_download": True, "sglang_model_repo": MODEL_REPO, "sglang_model_revision": "main",
                 "sglang_model_dir": str(tmp_path / "model"), "sglang_hf_endpoint": hub.endpoint,
                 "sglang_model_hf_command": support.HF_CLI, "sglang_model_download_poll_seconds": 1,
                 # At most 100 progress lines: a time limit of 40 s (+ 60 s for the async job) keeps them 1 s apart.
                 "sglang_model_download_timeout": 40,
                 "sglang_model_download_log": str(tmp_path / "log" / "model-download.log")}, **variables)
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": {"target": host}}}))
    # facts_first: as playbooks/deploy.yml, which publishes the staged commit before the role runs.
    (tmp_path / "play.yml").write_text(PLAYBOOK.replace("  tasks:\n", "  tasks:\n" + FACTS_FIRST.lstrip("\n"))
                                       if facts_first else PLAYBOOK)
    # No token of this machine's environment (hf would take HF_TOKEN over its token file), HOME away from a token an
    # earlier `hf auth login` stored; the async jobs get their own directory (async_status looks for a job under the
    # remote user's home, not under $HOME).
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_ASYNC_DIR=str(tmp_path / "async"), HOME=str(tmp_path / "home"))
    os.makedirs(str(tmp_path / "home"), exist_ok=True)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
            str(tmp_path / "play.yml"), "-e", json.dumps({"_sglang_hf_token_file": str(tmp_path / "run" / "token")})]
    argv += (["--check"] if check else []) + (["-" + "v" * verbosity] if verbosity else [])
    return argv, env


def run_role(tmp_path, hub, **options):
    """(returncode, every task result by its own name, the whole output, the host's stats) of one ansible-playbook
    run."""
    argv, env = role_command(tmp_path, hub, **options)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env, cwd=str(tmp_path))
    return parse_run(run.returncode, run.stdout, run.stderr)


def parse_run(returncode, stdout, stderr):
    # The json callback's document; with -v the display's lines come before it on stdout.
    report, _end = json.JSONDecoder().raw_decode(stdout[stdout.index('{\n    "custom_stats"'):])
    results = {}
    for task in report["plays"][0]["tasks"]:
        # The json callback names a role's tasks "<role> : <name>".
        results.setdefault(task["task"]["name"].split(" : ")[-1], []).append(task["hosts"]["target"])
    return returncode, results, stdout + stderr, report["stats"]["target"]


def messages(results, name):
    return [result.get("msg", "") for result in results.get(name, [])]


def fetched(hub, since=0):
    """The files the hub or its CDN sent a body of (GET), in order, from request ``since`` on."""
    return [entry["file"] for entry in hub.requests()[since:] if entry["method"] == "GET" and "file" in entry]


def hf_processes(directory):
    """Command lines of the processes that name ``directory`` (a running hf download into it)."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if directory.encode() in argv and b"download" in argv:
            found.append(argv)
    return found


def test_a_gated_model_is_planned_downloaded_with_progress_and_checked_and_the_token_shows_nowhere(hf_hub, tmp_path):
    # One file at a time at 1 MiB/s (the throttle is per transfer): the 2.9 MiB take about 3 s, several progress lines.
    hub = hf_hub(root=gated_root(tmp_path), faults={"bytes_per_second": 1 << 20})
    # -vvv: the display then shows every command the connection runs, with the environment Ansible puts on it.
    rc, results, output, _stats = run_role(tmp_path, hub, verbosity=3, sglang_model_repo=GATED,
                                           sglang_hf_token=TOKEN, sglang_model_download_workers=1)
    assert rc == 0, output[-3000:]
    plan = results["Plan the model download from the Hub"][0]
    assert plan["commit"] == MODEL_COMMIT and plan["gated"] == "manual"
    assert plan["download_bytes"] == plan["expected_bytes"] > 0 and plan["files"] == 13
    assert messages(results, "Warn that the model revision is not a commit")[0].startswith(
        "WARNING: sglang_model_revision main is a branch or tag of %s; it resolves to %s" % (GATED, MODEL_COMMIT))
    # The planned commit is what hf was asked for, never the branch.
    job = results["Collect the download's result"][0]
    assert job["rc"] == 0 and "--revision %s " % MODEL_COMMIT in job["cmd"] and " main " not in job["cmd"]
    assert " --max-workers 1 " in job["cmd"]
    progress = messages(results, "Show the download's progress")
    total = "%.2f" % (plan["expected_bytes"] / 1048576.0)
    assert len(progress) >= 2, progress
    assert progress[0].startswith("Model download (%s at 0123456789ab): running after " % GATED), progress
    assert progress[-1].startswith("Model download (%s at 0123456789ab): done after " % GATED), progress
    assert all(" (limit 40 s): " in line and (" of %s MiB on disk (" % total) in line for line in progress)
    assert ("%s of %s MiB on disk (100%%)" % (total, total)) in progress[-1]
    percents = [int(line.split(" MiB on disk (")[1].split("%")[0]) for line in progress]
    assert percents == sorted(percents) and percents[0] < 100
    check = results["Check the downloaded model against the revision"][0]
    assert check["complete"] and check["hashing"]["hashed_files"] == 13 and check["commit"] == MODEL_COMMIT
    assert results["Report the downloaded files"][0]["changed"]
    assert results["Show the revision"][0]["sglang_model_revision"] == MODEL_COMMIT
    # hf had the token (the gated files came with it) ...
    assert {entry["auth"] for entry in hub.requests() if entry["listener"] == "hub" and GATED in entry["path"]} == {"bearer"}
    assert sorted(set(fetched(hub))) == sorted(model.model_files())
    # ... from the file only, removed after: not in a result, a log, the async job's status, or a command line
    # (with -vvv the display shows what the connection executes, the download's environment included).
    assert "HF_TOKEN_PATH=%s" % (tmp_path / "run" / "token") in output
    assert TOKEN not in output
    assert "EXEC" in output
    for written in [str(tmp_path / "log" / "model-download.log")] + glob.glob(str(tmp_path / "async" / "*")):
        with open(written, encoding="utf-8", errors="replace") as handle:
            assert TOKEN not in handle.read(), written
    assert not os.path.exists(str(tmp_path / "run" / "token"))
    assert results["Hand the token to hf in a root-only file"][0]["censored"]

    # A rerun plans nothing to download, downloads nothing and changes nothing; the hashes come from the cache.
    requests_before = len(hub.requests())
    rc, results, output, stats = run_role(tmp_path, hub, sglang_model_repo=GATED, sglang_hf_token=TOKEN)
    assert rc == 0 and stats["changed"] == 0, output[-3000:]
    plan = results["Plan the model download from the Hub"][0]
    assert plan["download_bytes"] == 0 and plan["complete"] and plan["hashing"]["cached_files"] == 13
    assert results["Start the model download (output in %s)" % (tmp_path / "log" / "model-download.log")][0]["skipped"]
    assert fetched(hub, requests_before) == []
    assert results["Show the revision"][0]["sglang_model_revision"] == MODEL_COMMIT
    assert TOKEN not in output


def test_without_the_token_the_gated_model_fails_in_the_plan(hf_hub, tmp_path):
    hub = hf_hub(root=gated_root(tmp_path))
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_repo=GATED)
    assert rc != 0
    assert "%s is gated: give a token" % GATED in results["Plan the model download from the Hub"][0]["msg"]
    assert "Access to model %s is restricted" % GATED in output
    assert "Start the model download (output in %s)" % (tmp_path / "log" / "model-download.log") not in results
    assert fetched(hub) == []
    assert not os.path.exists(str(tmp_path / "model"))


def test_a_damaged_file_is_named_then_replaced_by_the_next_run(hf_hub, tmp_path):
    hub = hf_hub(faults={"damage": {SHARD: 777}})
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_revision=MODEL_COMMIT)
    assert rc != 0
    # A commit: no warning about a branch.
    assert results["Warn that the model revision is not a commit"][0]["skipped"]
    failure = messages(results, "Fail with the files still missing or damaged")[0]
    assert "%s is damaged: its sha256 is" % SHARD in failure and "The next run removes what is damaged" in failure
    assert "model-00001-of-00004.safetensors" not in failure
    hub.set_faults({})
    requests_before = len(hub.requests())
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_revision=MODEL_COMMIT)
    assert rc == 0, output[-3000:]
    plan = results["Plan the model download from the Hub"][0]
    assert [entry["path"] for entry in plan["damaged"]] == [SHARD] and plan["missing"] == []
    removed = [item["item"] for item in results["Remove what is in the way of the download"][0]["results"]]
    assert removed == [str(tmp_path / "model" / SHARD),
                       str(tmp_path / "model" / ".cache" / "huggingface" / "download" / (SHARD + ".metadata"))]
    # Only the damaged shard comes again (hf trusts every other file by its metadata).
    assert fetched(hub, requests_before) == [SHARD]
    assert fetched(hub).count(SHARD) == 2 and fetched(hub).count("config.json") == 1
    assert results["Check the downloaded model against the revision"][0]["complete"]


def test_a_download_stopped_by_its_time_limit_is_completed_by_the_next_run(hf_hub, tmp_path):
    # 64 KiB/s per transfer: the largest shard alone would take about 15 s.
    hub = hf_hub(faults={"bytes_per_second": 64 * 1024})
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_download_timeout=3)
    assert rc != 0
    # hf was stopped by the time limit (coreutils' timeout: 124), not by the async job's backstop.
    assert (tmp_path / "log" / "model-download.log.rc").read_text() == "124\n"
    assert results["Collect the download's result"][0]["rc"] == 124
    failure = messages(results, "Fail with hf's own words")[0]
    assert "(stopped after sglang_model_download_timeout, 3 s)" in failure and "the next run downloads only the rest" in failure
    progress = messages(results, "Show the download's progress")
    assert all(line.startswith("Model download (%s at 0123456789ab): running after " % MODEL_REPO)
               for line in progress[:-1]) and progress[:-1], progress
    assert progress[-1].startswith("Model download (%s at 0123456789ab): done after " % MODEL_REPO), progress
    # Stopped means stopped: no hf is left writing into the directory.
    assert hf_processes(str(tmp_path / "model")) == []
    metadata = str(tmp_path / "model" / ".cache" / "huggingface" / "download")
    # What hf finished before it was stopped: the files it wrote its metadata for (.gitattributes.metadata included).
    done = {os.path.relpath(os.path.join(parent, name), metadata)[:-len(".metadata")]
            for parent, _dirs, names in os.walk(metadata) for name in names if name.endswith(".metadata")}
    assert SHARD not in done
    hub.set_faults({})
    requests_before = len(hub.requests())
    rc, results, output, _stats = run_role(tmp_path, hub)
    assert rc == 0, output[-3000:]
    # The next run removes the partial files the killed hf left and downloads only what the first did not finish.
    plan = results["Plan the model download from the Hub"][0]
    assert sorted(plan["missing"]) == sorted(set(model.model_files()) - done)
    assert set(plan["remove"]) == {entry["path"] for entry in plan["incomplete"]["files"]}
    assert sorted(fetched(hub, requests_before)) == sorted(set(model.model_files()) - done)
    assert not glob.glob(metadata + "/*.incomplete")
    assert results["Check the downloaded model against the revision"][0]["complete"]


def hf_pids(directory):
    """PIDs of the hf processes downloading into ``directory`` (the interpreter running hf, not timeout)."""
    pids = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if directory.encode() in argv and b"download" in argv and os.path.basename(argv[0].decode()).startswith("python"):
            pids.append(int(cmdline.split("/")[2]))
    return pids


def wait_for_hf(directory, process=None):
    """The PID of the hf downloading into ``directory``, once it runs and has a partial file (bounded)."""
    incomplete = os.path.join(directory, ".cache", "huggingface", "download", "*.incomplete")
    wait_until(lambda: hf_pids(directory) and glob.glob(incomplete) or (process and process.poll() is not None),
               timeout=120, what="hf downloading into %s" % directory)
    pids = hf_pids(directory)
    assert pids, "hf ended before it was seen (the run: %s)" % (process.communicate() if process else "-",)
    return pids[0]


def test_a_download_killed_from_outside_is_not_called_a_time_limit_and_the_next_run_completes_it(hf_hub, tmp_path):
    # The OOM killer or an operator: hf gets SIGKILL long before its time limit (40 s).
    hub = hf_hub(faults={"bytes_per_second": 64 * 1024})
    argv, env = role_command(tmp_path, hub)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path))
    try:
        os.kill(wait_for_hf(str(tmp_path / "model"), process), signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    rc, results, output, _stats = parse_run(process.returncode, stdout, stderr)
    assert rc != 0
    failure = messages(results, "Fail with hf's own words")[0]
    assert "failed (killed by signal 9, before its time limit: the OOM killer, or someone stopped it)" in failure, failure
    assert "sglang_model_download_timeout" not in failure
    hub.set_faults({})
    rc, results, output, _stats = run_role(tmp_path, hub)
    assert rc == 0, output[-3000:]
    assert results["Check the downloaded model against the revision"][0]["complete"]


def test_a_download_an_interrupted_run_left_running_is_stopped_before_the_next_run_downloads(hf_hub, tmp_path):
    # Ctrl-C on the controller: ansible-playbook ends, the async hf in the target goes on writing into the directory.
    hub = hf_hub(faults={"bytes_per_second": 64 * 1024})
    directory = str(tmp_path / "model")
    argv, env = role_command(tmp_path, hub)
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(tmp_path),
                               start_new_session=True)
    try:
        leftover = wait_for_hf(directory, process)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert hf_pids(directory) == [leftover], "the interrupted run's hf must still run for this test"
    hub.set_faults({})
    rc, results, output, _stats = run_role(tmp_path, hub)
    assert rc == 0, output[-3000:]
    stop = results["Stop a download that an interrupted run left running"][0]
    assert stop["changed"] and stop["stdout"].startswith("Stopped the hf download (wrapper PID "), stop
    assert not os.path.exists("/proc/%d" % leftover) or leftover not in hf_pids(directory)
    assert results["Check the downloaded model against the revision"][0]["complete"]
    assert hf_processes(directory) == []
    # A rerun with nothing running stops nothing.
    rc, results, output, _stats = run_role(tmp_path, hub)
    assert rc == 0 and not results["Stop a download that an interrupted run left running"][0]["changed"]


def test_a_failed_download_fails_with_hfs_words_and_the_token_file_is_removed(hf_hub, tmp_path):
    hub = hf_hub(root=gated_root(tmp_path))
    # An hf that fails the way hf does (its message on stderr, exit 1), after checking that it got the token file.
    failing = tmp_path / "failing-hf"
    failing.write_text('#!/bin/sh\ntest -s "$HF_TOKEN_PATH" && test -z "$HF_TOKEN" || exit 9\n'
                       'echo "Fetching 13 files:   0%" >&2\necho "Error: peer closed connection" >&2\nexit 1\n')
    failing.chmod(0o755)
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_repo=GATED, sglang_hf_token=TOKEN,
                                           sglang_model_hf_command=str(failing))
    assert rc != 0
    failure = messages(results, "Fail with hf's own words")[0]
    assert failure.startswith("hf download of %s at %s into %s failed (exit 1); full log:" % (
        GATED, MODEL_COMMIT, tmp_path / "model")), failure
    assert failure.endswith("Last lines: Fetching 13 files:   0% | Error: peer closed connection"), failure
    assert "Check the downloaded model against the revision" not in results
    assert not os.path.exists(str(tmp_path / "run" / "token")) and TOKEN not in output


def test_check_mode_plans_and_downloads_nothing(hf_hub, tmp_path):
    hub = hf_hub()
    rc, results, output, stats = run_role(tmp_path, hub, check=True)
    assert rc == 0, output[-3000:]
    report = messages(results, "Report the download that would run")[0]
    assert report.startswith("Would download %s at %s into %s: " % (MODEL_REPO, MODEL_COMMIT, tmp_path / "model"))
    assert "13 of 13 files to download, 2.9 MiB" in report and stats["changed"] == 1
    assert results["Start the model download (output in %s)" % (tmp_path / "log" / "model-download.log")][0]["skipped"]
    assert fetched(hub) == []
    assert not os.path.exists(str(tmp_path / "model")) and not os.path.exists(str(tmp_path / "log"))
    assert results["Show the revision"][0]["sglang_model_revision"] == MODEL_COMMIT


def test_the_pinned_revision_is_planned_not_the_staged_commit_the_facts_published(hf_hub, tmp_path):
    hub = hf_hub()
    # An older model staged: its download metadata records another commit.
    staged = tmp_path / "model" / ".cache" / "huggingface" / "download"
    os.makedirs(str(staged))
    (staged / "config.json.metadata").write_text("fedcba9876543210fedcba9876543210fedcba98\n0000\n1.0\n")
    rc, results, output, _stats = run_role(tmp_path, hub, check=True, facts_first=True,
                                           sglang_model_revision=MODEL_COMMIT)
    assert rc == 0, output[-3000:]
    facts = results["Publish the installed versions and the model revision"][0]["ansible_facts"]
    assert facts["sglang_model_revision"] == "fedcba9876543210fedcba9876543210fedcba98"
    plan = results["Plan the model download from the Hub"][0]
    assert plan["commit"] == MODEL_COMMIT and plan["revision"] == MODEL_COMMIT and plan["files"] == 13
    assert results["Show the revision"][0]["sglang_model_revision"] == MODEL_COMMIT


def test_a_download_that_does_not_fit_is_refused_with_the_numbers(hf_hub, tmp_path):
    hub = hf_hub()
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_disk_reserve_gib=1e9)
    assert rc != 0
    plan = results["Plan the model download from the Hub"][0]
    assert not plan["disk"]["enough"]
    refusal = results["Refuse a model download that does not fit"][0]["msg"]
    assert refusal.startswith("Not enough disk space for %s at %s: 0.00 GiB still to download" % (MODEL_REPO, MODEL_COMMIT))
    assert "plus 1000000000.0 GiB reserve need 1000000000.00 GiB" in refusal
    assert "and %s has %.2f GiB free" % (plan["disk"]["path"], plan["disk"]["free_bytes"] / 1073741824.0) in refusal
    assert "Free space on that filesystem, point sglang_model_dir at a larger one" in refusal
    assert fetched(hub) == [] and not os.path.exists(str(tmp_path / "model"))


def test_a_pre_staged_model_missing_a_shard_is_named_without_a_hub(hf_hub, tmp_path):
    hub = hf_hub()
    staged = tmp_path / "model"
    shutil.copytree(os.path.join(hub.root, *MODEL_REPO.split("/"), "commits", MODEL_COMMIT), str(staged))
    os.remove(str(staged / SHARD))
    rc, results, output, _stats = run_role(tmp_path, hub, sglang_model_download=False,
                                           sglang_hf_endpoint="http://127.0.0.1:9")
    assert rc != 0
    assert results["Plan the model download from the Hub"][0]["skipped"]
    failure = messages(results, "Fail when the pre-staged model is not whole")[0]
    assert failure.startswith("%s does not hold a whole model: missing: %s" % (staged, SHARD))
    assert "model.safetensors.index.json names shards that are not here: %s" % SHARD in failure
    assert "model-00001-of-00004.safetensors" not in failure
    assert hub.requests() == []


def test_a_whole_pre_staged_model_passes_and_without_a_model_dir_nothing_is_checked(hf_hub, tmp_path):
    hub = hf_hub()
    staged = tmp_path / "model"
    shutil.copytree(os.path.join(hub.root, *MODEL_REPO.split("/"), "commits", MODEL_COMMIT), str(staged))
    # What `hf download --local-dir` records: the commit on the metadata's first line.
    os.makedirs(str(staged / ".cache" / "huggingface" / "download"))
    (staged / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text(
        MODEL_COMMIT + "\n0000\n1.0\n")
    rc, results, output, stats = run_role(tmp_path, hub, sglang_model_download=False, sglang_model_revision="",
                                          sglang_hf_endpoint="http://127.0.0.1:9")
    assert rc == 0 and stats["changed"] == 0, output[-3000:]
    staged_check = results["Check the pre-staged model directory"][0]
    assert staged_check["complete"] and staged_check["weights"] == "sharded" and staged_check["index"]["shards"] == 4
    assert results["Warn about a model directory without weights"][0]["skipped"]
    assert results["Show the revision"][0]["sglang_model_revision"] == MODEL_COMMIT
    # Neither a repository nor a model directory: the model steps are skipped, the revision is the variable's.
    rc, results, output, stats = run_role(tmp_path, hub, sglang_model_download=False, sglang_model_dir="",
                                          sglang_model_repo="", sglang_model_revision="pinned-elsewhere")
    assert rc == 0 and stats["changed"] == 0, output[-3000:]
    for name in ("Plan the model download from the Hub", "Check the pre-staged model directory",
                 "Fail when the pre-staged model is not whole"):
        assert results[name][0]["skipped"], name
    assert results["Show the revision"][0]["sglang_model_revision"] == "pinned-elsewhere"
    assert hub.requests() == []


def test_the_progress_lines_are_at_most_a_hundred():
    """Each progress step nests one include deeper (ansible-core fails beyond about 240): a long time limit spaces the
    lines further than sglang_model_download_poll_seconds."""
    files = ["roles/sglang/defaults/main.yml", "roles/sglang/vars/main.yml"]
    assert render("{{ _sglang_model_download_interval }}", var_files=files) == 145  # (14400 + 60) / 100
    assert render("{{ _sglang_model_download_interval }}", {"sglang_model_download_timeout": 600},
                  var_files=files) == 30
    short = {"sglang_model_download_timeout": 40, "sglang_model_download_poll_seconds": 1}
    assert render("{{ _sglang_model_download_interval }}", short, var_files=files) == 1


def test_a_download_needs_a_pinned_revision(hf_hub, tmp_path):
    hub = hf_hub()
    rc, results, _output, _stats = run_role(tmp_path, hub, sglang_model_revision="")
    assert rc != 0
    assert "a model download needs sglang_model_repo, sglang_model_dir and a pinned sglang_model_revision" in \
        results["Check the role's inputs"][0]["msg"]
    assert "Plan the model download from the Hub" not in results


def test_only_a_commit_is_taken_from_the_staged_models_record():
    """The record is in a directory others may write: its first line becomes the deployment's model revision (unit,
    deployment ID, messages) only when it is a 40-hex commit."""
    import base64  # pylint: disable=import-outside-toplevel

    files = ["roles/sglang/vars/main.yml"]

    def staged(raw):
        return render("{{ _sglang_model_staged_commit }}",
                      {"_sglang_model_metadata": {"content": base64.b64encode(raw).decode()}}, var_files=files)

    assert staged(("%s\n0000\n1.0\n" % MODEL_COMMIT).encode()) == MODEL_COMMIT
    for hostile in (b"", b"\n", b"root:x:0:0:root:/root:/bin/bash\n", b"../../etc\n", (MODEL_COMMIT + "x\n").encode(),
                    MODEL_COMMIT.upper().encode(), ("%s --trust-remote-code\n" % MODEL_COMMIT).encode()):
        assert staged(hostile) == "", hostile
    # Not read (no record, a symlink, a FIFO: tasks/model-revision-read.yml reads only a small regular file).
    assert render("{{ _sglang_model_staged_commit }}", {"_sglang_model_metadata": {"skipped": True}},
                  var_files=files) == ""
