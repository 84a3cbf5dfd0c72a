# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`ansible-playbook -i inventories/example -i inventories/sandbox deploy.yml` end to end, on the embedded sandbox.

The sandbox is what `make sandbox` builds and deploys: the example inventory's configuration (inventories/example),
through the overlay of what only the sandbox needs (inventories/sandbox, tests/unit/scripts/test_sandbox_overlay.py).
This machine is the example's Proxmox node pve1 (pve-sim on real LXC, the GPU kit), llm-qwen-a and llm-qwen-b are
containers reached over SSH on the bridge pve-sim creates (10.213.0.0/24, nothing routed beyond this machine), the
SGLang simulator is the server and the real router (smg) runs beside llm-qwen-a. The tests run in file order against
one sandbox (module fixture):

  first deploy (`scripts/sandbox.sh up`, as a user runs it) -> unchanged rerun is changed=0 -> verify.yml passes ->
  --check --diff of a change shows it and changes nothing -> a bad change (the simulator's startup OOM) stops the
  rollout at the first container, which is back on its previous deployment and verified, the second untouched ->
  a package upgrade (a stand-in release that cannot start) is staged on both containers, fails at the first, which
  runs its previous SGLang from its previous environment again, the second untouched ->
  the incident: unit stopped, a stray started with nohup on the port, verify.yml names the stray's PID; stray
  removed, deploy again passes -> `make sandbox-down` removes what it created and nothing else -> last, a sandbox of its
  own in PVE 8 mode (`SANDBOX_PVE_RELEASE=8`, Debian 12 containers) deploys the example and verifies, then goes.

Needs root, lxc, debootstrap/zstd (the container template is built once into .build/pve-sim-cache) and ssh.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus
from ansible_collections.llmops.serving.tests.integration.pve_sim_support import REPO, PveSim, sim_cli, sim_command, wait_task
from ansible_collections.llmops.serving.tests.support.ansible_run import ansible_module, ansible_playbook, inventory_args, program, run_env
from ansible_collections.llmops.serving.tests.support.promtool import check_metrics
from ansible_collections.llmops.serving.tests.support.sandbox_inventory import INVENTORY, OVERLAY, SANDBOX, ansible_environment
from ansible_collections.llmops.serving.tests.support.sglang_request_log import received_sampling
from ansible_collections.llmops.serving.tests.support.waiting import wait_until

# The pve-sim that scripts/sandbox.sh starts (and stops).
PVE_SIM = PveSim(SANDBOX / "pve-sim")
REPORTS = SANDBOX / "reports"
VENV_BIN = pathlib.Path(sys.executable).parent
NODE = "pve1"
HOSTS = {"llm-qwen-a": {"vmid": 201, "instance": "qwen36", "port": 30000, "gpus": [0, 1]},
         "llm-qwen-b": {"vmid": 202, "instance": "qwen36", "port": 30000, "gpus": [2, 3]}}
# The multi-node model the last tests add (scripts/sandbox-inventory.py 2 --model-nodes 2): one instance on two nodes.
MODEL_NODES = {"llm-qwen-c": {"vmid": 203, "instance": "qwen36-mn", "port": 30100},
               "llm-qwen-d": {"vmid": 204, "instance": "qwen36-mn", "port": 30100}}
CONTAINERS = dict(HOSTS, **MODEL_NODES)
# Their addresses on the bridge (inventories/sandbox, scripts/sandbox-inventory.py): the Hub stand-in logs each
# request's client.
ADDRESSES = {"llm-qwen-a": "10.213.0.11", "llm-qwen-b": "10.213.0.12", "llm-qwen-c": "10.213.0.13", "llm-qwen-d": "10.213.0.14"}
# The Hub stand-in scripts/sandbox.sh runs (its root, request log and fault switches) and where the example downloads.
HUB = SANDBOX / "hf-hub"
MODEL_REPO = "Qwen/Qwen3.6-27B"
MODEL_DIR = "/models/Qwen3.6-27B"
# What the inventory gives the server, plus the simulator's fault: the deploy of a change that cannot start.
SANDBOX_ENVIRONMENT = {"SGLANG_SIM_STARTUP_SECONDS": "2", "SGLANG_LOG_MS": "1", "SGLANG_SIM_ITERATION_MS": "5"}

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (LXC containers, a bridge, device nodes)"),
    pytest.mark.skipif(shutil.which("lxc-start") is None, reason="lxc-start is missing (apt-get install lxc)"),
]


def sandbox_script(*args, timeout=1800, settings=None):
    """scripts/sandbox.sh ARGS with the sandbox settings a user passes to make (SANDBOX_PVE_RELEASE=8, ...)."""
    return subprocess.run(["bash", str(REPO / "scripts" / "sandbox.sh")] + list(args), cwd=str(REPO), capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env=dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ["PATH"], **(settings or {})))


def playbook(name, *args, timeout=900, environment=None):
    """ansible-playbook on the example and the sandbox's overlay with the json callback; an AnsibleRun."""
    return ansible_playbook(name, *args, inventory=INVENTORY, cwd=str(REPO), timeout=timeout,
                            environment=ansible_environment(environment))


def pct(vmid, *argv, timeout=120):
    return PVE_SIM.pct_exec(vmid, *argv, timeout=timeout)


def inside(host, *argv):
    result = pct(CONTAINERS[host]["vmid"], *argv)
    assert result.returncode == 0, "%s in %s failed: %s%s" % (argv, host, result.stdout, result.stderr)
    return result.stdout


def record(host):
    return json.loads(inside(host, "cat", "/var/lib/llmops-serving/%s/deployment.json" % CONTAINERS[host]["instance"]))


def unit_state(host):
    unit = "sglang-%s.service" % CONTAINERS[host]["instance"]
    text = inside(host, "systemctl", "show", "--property=MainPID,InvocationID,ActiveState", unit)
    return dict(line.split("=", 1) for line in text.strip().splitlines())


def summary(host):
    return json.loads((REPORTS / ("%s-%s.json" % (host, CONTAINERS[host]["instance"]))).read_text())


def network_links():
    result = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30, check=True)
    return [line.split(":", 2)[1].strip().split("@")[0] for line in result.stdout.splitlines()]


LINKS_BEFORE = []


@pytest.fixture(scope="module")
def sandbox():
    if SANDBOX.exists():
        pytest.fail("a sandbox exists in %s (make sandbox-down first): these tests build and remove their own" % SANDBOX)
    if os.path.exists("/proc/driver/nvidia/version"):
        # The kit replaces /dev/nvidia* (pve-sim gpu-kit refuses to there): never on a machine with a real driver.
        pytest.skip("this machine has an NVIDIA driver loaded: the sandbox's GPU kit would replace its /dev/nvidia* nodes")
    # Without a driver, /dev/nvidia* nodes are a stand-in's left behind (a killed run): the kit replaces them and
    # `down` removes what it made.
    # veth pairs of the containers come and go, and so do the bridges of test_pve_sim_lxc.py (pvst<id>), which the
    # integration tier runs beside this module; what else existed before the sandbox must survive it.
    LINKS_BEFORE[:] = [name for name in network_links() if not name.startswith(("veth", "pvst"))]
    up = sandbox_script("up")
    try:
        yield up
    finally:
        down = sandbox_script("down", timeout=600)
        assert down.returncode == 0, down.stdout + down.stderr


def kit_gpus():
    """The GPU kit's GPUs as the node's nvidia-smi lists them (index, UUID), with each one's device minor from the kernel
    module's information file (nvidia-smi has no query field for it)."""
    listed = subprocess.run([str(SANDBOX / "gpu-kit" / "usr" / "bin" / "nvidia-smi"), "--query-gpu=index,uuid",
                             "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True).stdout
    minors = dict((gpu["uuid"], gpu["minor"]) for gpu in nvidia_gpus.read_driver_gpus(str(SANDBOX / "gpu-kit" / "proc/driver/nvidia")))
    return [{"index": int(index), "uuid": uuid, "minor": minors[uuid]} for index, uuid in (line.split(", ") for line in listed.splitlines())]


def test_first_deploy_ends_with_two_verified_servers_each_on_its_own_gpus(sandbox):
    assert sandbox.returncode == 0, sandbox.stdout[-6000:] + sandbox.stderr[-4000:]
    assert "Verification summary" in sandbox.stdout
    node = kit_gpus()
    for host, settings in HOSTS.items():
        report = summary(host)
        assert report["status"] == "passed", report
        assert report["deployment_id"] == record(host)["deployment_id"]
        assert unit_state(host)["ActiveState"] == "active"
        assert int(report["main_pid"]) == int(unit_state(host)["MainPID"])
        assigned = [node[index] for index in settings["gpus"]]
        # The container's config passes exactly its GPUs' nodes (by minor: the kit's minors do not follow the index)...
        config = PVE_SIM.conf_path(settings["vmid"]).read_text()
        passed = sorted(int(line.split()[1][len("/dev/nvidia"):]) for line in config.splitlines()
                        if line.startswith("lxc.mount.entry: /dev/nvidia") and line.split()[1][len("/dev/nvidia"):].isdigit())
        assert passed == sorted(gpu["minor"] for gpu in assigned), config
        # ... its own nvidia-smi lists exactly them, the server holds them, and the summary names them.
        inside_smi = inside(host, "nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader").split()
        assert inside_smi == [gpu["uuid"] for gpu in assigned]
        assert [(gpu["index"], gpu["uuid"]) for gpu in report["gpus"]] == [(gpu["index"], gpu["uuid"]) for gpu in assigned]
        assert record(host)["inputs"]["gpus"] == [gpu["uuid"] for gpu in assigned]
        assert "  GPU %d: %s (/dev/nvidia%d)" % (assigned[0]["index"], assigned[0]["uuid"], assigned[0]["minor"]) in sandbox.stdout
        # Unprivileged, as the role's default is: container root is host uid 100000.
        assert inside(host, "cat", "/proc/self/uid_map").split() == ["0", "100000", "65536"]
        # The example's sizing serves what it asks: 4 running requests, and the KV pool holds a 131072-token request.
        serves = report["serves"]
        assert serves["source"] == "startup log", serves
        assert serves["running_requests"] == serves["requested_running_requests"] == 4, serves
        assert serves["context_length"] == 131072 and serves["full_context_requests"] >= 1, serves
        argv = inside(host, "cat", "/proc/%s/cmdline" % report["main_pid"]).split("\0")
        assert argv[argv.index("--context-length") + 1] == "131072" and "--log-requests" in argv, argv
        # The container's GPU preflight and the canaries, each in the summary: MTP on, a tool parser, so all five run
        # (the first verification records the greedy reference beside the deployment record).
        assert report["preflight"]["errors"] == 0 and report["preflight"]["warnings"] == 0, report["preflight"]
        assert [(item["name"], item["passed"]) for item in report["canaries"]] == [
            ("greedy_reference", True), ("speculative_lossless", True), ("tool_call", True), ("long_context_acceptance", True),
            ("soak", True)], report["canaries"]
        assert report["canary_acceptance"]["long"] >= 0.5 * report["canary_acceptance"]["short"], report["canary_acceptance"]
        assert "preflight container %s: 0 error(s), 0 warning(s)" % host in sandbox.stdout
    # The node's preflight: the path between each server's two GPUs (one PCIe switch in the kit), nothing wrong.
    preflight = json.loads((REPORTS / "preflight-pve1.json").read_text())
    assert (preflight["errors"], preflight["warnings"]) == (0, 0), preflight["summary"]
    assert sorted((item["check"], item["subject"]) for item in preflight["findings"]) == [
        ("p2p_path", "server %s" % host) for host in sorted(HOSTS)], preflight["summary"]
    assert "preflight node pve1: 0 error(s), 0 warning(s)" in sandbox.stdout


# The router beside the first server (the example's group sglang_routers), and the servers it must list.
ROUTER_HOST = "llm-qwen-a"
ROUTER_URL = "http://10.213.0.11:30080"
ROUTER_WORKERS = ["http://10.213.0.11:30000", "http://10.213.0.12:30000"]
# The release of smg the role installs (its default).
ROUTER_VERSION = re.search(r'^sglang_router_version: "([^"]+)"$', (REPO / "roles/sglang_router/defaults/main.yml").read_text(),
                           re.MULTILINE).group(1)


def router_request(path, body=None):
    """(status, parsed JSON body) of a request to the sandbox's router, with the API key; body=None is a GET."""
    key = (SANDBOX / "secrets" / "sglang-api-key").read_text().strip()
    request = urllib.request.Request(ROUTER_URL + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def hub_model():
    """(commit, {path: sha256}) of what the Hub stand-in serves as the example's model at main."""
    repo = HUB / "root" / MODEL_REPO
    commit = json.loads((repo / "repo.json").read_text())["refs"]["main"]
    files = repo / "commits" / commit
    return commit, {str(path.relative_to(files)): hashlib.sha256(path.read_bytes()).hexdigest()
                    for path in files.rglob("*") if path.is_file()}


def hub_requests():
    return [json.loads(line) for line in (HUB / "requests.jsonl").read_text().splitlines() if line.strip()]


def fetched(requests, host):
    """The files whose body the hub or its CDN sent to the host (GET), in order."""
    return [entry["file"] for entry in requests
            if entry["method"] == "GET" and "file" in entry and entry["client"] == ADDRESSES[host]]


def model_hashes(host, names):
    """{path: sha256} of the model's files in the host's model directory."""
    listed = inside(host, "sha256sum", "--", *("%s/%s" % (MODEL_DIR, name) for name in names))
    return dict((line.split("  ", 1)[1][len(MODEL_DIR) + 1:], line.split("  ", 1)[0]) for line in listed.splitlines())


def test_each_container_downloaded_the_examples_model_from_the_hub_with_the_real_hf(sandbox):
    # The example downloads its model (sglang_model_download); the sandbox's only change is where the Hub is.
    commit, files = hub_model()
    requests = hub_requests()
    for host in HOSTS:
        # Every file of the revision, each sent once to this container, without a token (the model is public).
        assert sorted(fetched(requests, host)) == sorted(files), host
        assert {entry["auth"] for entry in requests if entry["client"] == ADDRESSES[host]} == {"none"}
        assert model_hashes(host, sorted(files)) == files, host
        # The real client's download log, and the commit the branch resolved to in the deployment.
        assert MODEL_DIR in inside(host, "tail", "-c", "4096", "/var/log/llmops-serving/model-download.log")
        assert record(host)["inputs"]["model_revision"] == commit
    # The weights came from the CDN the hub redirects LFS files to, as the Hub does.
    shards = [entry for entry in requests if entry.get("file", "").endswith(".safetensors") and entry["method"] == "GET"]
    assert shards and {entry["listener"] for entry in shards} == {"cdn"}


def served_requests(host):
    """POST /generate lines in the server's current log: the requests it has served since it started."""
    log = inside(host, "cat", "/var/log/llmops-serving/%s/current.log" % HOSTS[host]["instance"])
    return log.count('"POST /generate HTTP/1.1" 200')


def test_the_router_serves_every_server_of_the_inventory(sandbox):
    report = json.loads((REPORTS / ("router-%s.json" % ROUTER_HOST)).read_text())
    assert report["status"] == "passed", report
    # In the order the router registered them.
    assert sorted(report["registered"]) == report["workers"] == ROUTER_WORKERS, report
    assert "router sglang-router.service on llm-qwen-a: passed" in sandbox.stdout
    # The real router (smg) from the mirror's PyPI wheels, under its unit, named by its deployment.
    pid = inside(ROUTER_HOST, "systemctl", "show", "--property=MainPID", "--value", "sglang-router.service").strip()
    assert inside(ROUTER_HOST, "cat", "/proc/%s/comm" % pid).strip() == "smg::router"
    assert "smg/smg_rs.abi3.so" in inside(ROUTER_HOST, "cat", "/proc/%s/maps" % pid)
    router_record = json.loads(inside(ROUTER_HOST, "cat", "/var/lib/llmops-serving/router/deployment.json"))
    record_id = router_record["deployment_id"]
    assert report["deployment_id"] == record_id and str(report["main_pid"]) == pid
    # Its dependencies are the versions the inventory pins (sglang_router_dependency_pins: the mirror's wheels).
    wheels = sorted(path.name for path in (SANDBOX / "mirror" / "router-wheels").glob("*.whl"))
    pinned = sorted("%s==%s" % tuple(name.split("-")[:2]) for name in wheels if not name.startswith("smg-"))
    # The virtualenv of the router's deployment (its record names it), of the role's release of smg.
    venv = router_record["inputs"]["package_environment"]
    assert venv.startswith("/opt/sglang-router/envs/%s-" % ROUTER_VERSION), venv
    assert router_record["inputs"]["versions"] == {"smg": ROUTER_VERSION}, router_record["inputs"]
    frozen = inside(ROUTER_HOST, venv + "/bin/pip", "freeze", "--all")
    installed = dict(line.split("==", 1) for line in frozen.split() if "==" in line)
    normal = dict((name.lower().replace("_", "-"), version) for name, version in installed.items())
    assert pinned and all(normal.get(pin.split("==")[0].lower().replace("_", "-")) == pin.split("==")[1] for pin in pinned), (pinned, installed)
    status, listing = router_request("/workers")
    assert status == 200 and sorted(worker["url"] for worker in listing["workers"]) == ROUTER_WORKERS, listing
    assert all(worker["is_healthy"] for worker in listing["workers"]), listing
    # Requests through the router reach both servers (the example's policy: round robin).
    before = {host: served_requests(host) for host in HOSTS}
    for _request in range(6):
        status, answer = router_request("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 4}})
        assert status == 200 and "meta_info" in answer, answer

    # A server logs a request's line as it finishes it, which may be after the client read the answer: wait for them.
    def all_six_logged():
        counts = {host: served_requests(host) for host in HOSTS}
        return counts if sum(counts.values()) - sum(before.values()) >= 6 else None

    after = wait_until(all_six_logged, 60, "the servers' logs to show the six requests")
    assert all(after[host] > before[host] for host in HOSTS), (before, after)
    assert sum(after.values()) - sum(before.values()) == 6, (before, after)


class RouterLoad:
    """A bounded stream of requests through the router from two client threads while a rollout runs.

    Each client sends one request at a time until stop() or until MAX_REQUESTS were sent in all; every answer that is
    not HTTP 200 with a completion, and every connection error, is an error with its cause."""

    MAX_REQUESTS = 4000

    def __init__(self, clients=2):
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.sent = 0
        self.errors = []
        self.threads = [threading.Thread(target=self.client, args=(n,), daemon=True) for n in range(clients)]

    def client(self, number):
        while not self.stopping.is_set():
            with self.lock:
                if self.sent >= self.MAX_REQUESTS:
                    return
                self.sent += 1
                count = self.sent
            try:
                status, answer = router_request("/generate", {"text": "client %d request %d" % (number, count),
                                                              "sampling_params": {"max_new_tokens": 8}})
                error = None if status == 200 and "meta_info" in (answer or {}) else "HTTP %s: %s" % (status, answer)
            except (OSError, ValueError) as exc:
                error = "%s: %s" % (type(exc).__name__, exc)
            if error:
                with self.lock:
                    self.errors.append(error)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in self.threads), "a load client did not stop"


def test_a_rollout_of_both_servers_behind_the_router_loses_no_request(sandbox):
    before = {host: unit_state(host) for host in HOSTS}
    figures = []
    # Out to a change and back to the inventory: two rollouts of both servers, each under the same bounded load.
    for extra in (["-e", "sglang_service_max_running_requests=3"], []):
        with RouterLoad() as load:
            run = playbook("deploy.yml", *extra)
        assert run.rc == 0, run.summary()
        assert rolled_out(run) == sorted(HOSTS)
        taken_out = [item for item in run.results if "membership in the routers in front of it to absent" in item.task]
        put_back = [item for item in run.results if "membership in the routers in front of it to present" in item.task]
        assert sorted(item.host for item in taken_out) == sorted(item.host for item in put_back) == sorted(HOSTS)
        # Each server left the router through smg's own draining state: drained (no request of it in flight at the
        # gateway), then removed.
        drained = [entry for item in taken_out for call in item.result.get("results", []) for entry in call.get("drained", [])]
        assert sorted(entry["url"] for entry in drained) == ROUTER_WORKERS, [item.result for item in taken_out]
        print("drained through the gateway: %s" % ", ".join("%s (%d in flight, %.1f s)" % (
            entry["url"], entry["in_flight"], entry["seconds"]) for entry in drained))
        figures.append((load.sent, len(load.errors)))
        print("\nrollout of %s behind the router: %d requests, %d failed %s" % (
            " and ".join(HOSTS), load.sent, len(load.errors), load.errors[:5]))
        assert load.errors == [], load.errors[:10]
        assert load.sent >= 20, "too few requests to measure anything: %d" % load.sent
    # Both servers restarted twice, and the router lists both again.
    assert all(unit_state(host)["InvocationID"] != before[host]["InvocationID"] for host in HOSTS)
    status, listing = router_request("/workers")
    assert sorted(worker["url"] for worker in listing["workers"]) == ROUTER_WORKERS, listing
    assert figures


def test_each_container_publishes_the_verdict_of_its_deployment_for_node_exporter(sandbox):
    for host, settings in HOSTS.items():
        text = inside(host, "cat", "/var/lib/prometheus/node-exporter/llmops_sglang_verdict_%s.prom" % settings["instance"])
        status, said = check_metrics(text)
        assert status == 0, said + text
        labels = 'sglang_instance="%s",deployment_id="%s"' % (settings["instance"], record(host)["deployment_id"])
        assert "llmops_sglang_verdict_passed{%s} 1\n" % labels in text, text
        assert 'llmops_sglang_verdict_serves{%s,quantity="running_requests"} 4\n' % labels in text, text
        assert 'llmops_sglang_verdict_serves{%s,quantity="context_length_tokens"} 131072\n' % labels in text, text
        assert 'invocation_id="%s"' % summary(host)["invocation_id"] in text


def test_each_server_applies_the_cards_sampling_and_allocated_the_planned_pools(sandbox):
    for host, settings in HOSTS.items():
        report = summary(host)
        # generation_config.json of the served model directory: the card's values for chat requests that leave them out.
        applied = report["server_sampling"]["applied"]
        assert sorted(applied) == ["min_p", "repetition_penalty", "temperature", "top_k", "top_p"], report["server_sampling"]
        served = json.loads(inside(host, "cat", "/var/lib/llmops-serving/%s/model/generation_config.json" % settings["instance"]))
        assert served["top_p"] == 0.95 and served["top_k"] == 20
        # The plan made before the restart against the pools this start printed: the simulator does the same arithmetic.
        memory = report["memory_plan"]
        assert memory["fits"] and memory["arithmetic"] == "0.5.23", memory
        assert all(memory["comparison"][pool]["error"] == 0
                   for pool in ("max_mamba_cache_size", "max_total_num_tokens", "max_running_requests")), memory


def test_the_incidents_request_gets_the_cards_values_from_the_server(sandbox):
    host = "llm-qwen-a"
    # The incident's client: temperature 0.7 and nothing else, to the chat endpoint (the key comes from the inventory).
    incident = {"temperature": 0.7, "top_p": None, "top_k": None, "min_p": None, "presence_penalty": None,
                "repetition_penalty": None}
    probe = ansible_module(host, "llmops.serving.generation_probe", {
        "url": "http://127.0.0.1:%d" % HOSTS[host]["port"], "api_key": "{{ sglang_service_api_key }}",
        "sampling": incident, "num_samples": 1, "max_tokens": 40, "fail_on_degenerate": False},
        inventory=INVENTORY, cwd=str(REPO), environment=ansible_environment())
    result = probe.module_result(host)
    assert not result.get("failed"), result
    log = inside(host, "cat", "/var/log/llmops-serving/%s/current.log" % HOSTS[host]["instance"])
    got = [params for params in received_sampling(log) if params.get("temperature") == 0.7]
    assert got, log[-3000:]
    # Every key SGLang lets the server supply to a chat request has the card's value; presence_penalty is the adapter's.
    assert {key: got[-1][key] for key in ("top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty")} == {
        "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0}, got[-1]


def assert_refused_before_any_change(run, before):
    """The run failed, no task of any host changed anything, and every server runs the invocation it ran before."""
    assert run.rc != 0
    assert all(host_stats["changed"] == 0 for host_stats in run.stats.values()), run.stats
    assert dict((host, unit_state(host)) for host in HOSTS) == before


def test_the_examples_old_sizing_and_an_unset_api_key_are_refused_before_any_change_naming_the_fix(sandbox):
    before = dict((host, unit_state(host)) for host in HOSTS)
    deployments = dict((host, record(host)["deployment_id"]) for host in HOSTS)
    # The example's old sizing (16 running requests, the model's own 262144-token context) on the same GPUs: SGLang
    # would start it and serve a few requests and not one of the full context; refused by default.
    run = playbook("deploy.yml", "-e", json.dumps({"sglang_service_max_running_requests": 16,
                                                   "sglang_service_context_length": None}))
    assert_refused_before_any_change(run, before)
    said = " ".join(run.failures())
    assert "The memory plan refuses this configuration (requested required)" in said, said
    assert "of max_running_requests=16" in said and "cannot hold one request of context_length=262144" in said, said
    assert "or accept serving less: sglang_service_memory_plan_require: start" in said, said
    # Serving less is an explicit choice: check mode shows what would be served, and goes on.
    run = playbook("deploy.yml", "--check", "--limit", "llm-qwen-a", "-e", json.dumps({
        "sglang_service_max_running_requests": 16, "sglang_service_memory_plan_require": "start"}))
    assert run.rc == 0, run.summary()
    shown = json.dumps([item.result.get("msg") for item in run.results if item.task.endswith("Show the memory plan")])
    assert re.search(r"serves \d+ of 16 requested running requests", shown), shown
    # SGLANG_API_KEY unset: the example's lookup gives an empty key, which is refused, not a server without
    # authentication.
    run = playbook("deploy.yml", environment={"SGLANG_API_KEY": ""})
    assert_refused_before_any_change(run, before)
    said = " ".join(run.failures())
    assert "sglang_service_api_key is empty, so the listener on 0.0.0.0 would accept anyone who reaches it" in said, said
    assert "sglang_service_authentication: none" in said
    assert dict((host, record(host)["deployment_id"]) for host in HOSTS) == deployments


STAGING_PLAY = "Stage SGLang on the containers that cut over"
ROLLOUT_PLAY = "Roll out the servers, one batch of containers at a time"


def rolled_out(run):
    """The hosts that entered the serial cutover in a run."""
    return sorted({item.host for item in run.results if item.play == ROLLOUT_PLAY})


LEASES = SANDBOX / "node-root" / "run" / "lock" / "llmops-serving"


def test_unchanged_rerun_changes_nothing(sandbox):
    before = dict((host, unit_state(host)) for host in HOSTS)
    # A second deploy started while this one plans (issue 30): refused by the first play, before any change, naming
    # this run, which goes on as if alone.
    second = ["env", "-u", "LLMOPS_TEST_RUN_ARGV", "-u", "LLMOPS_TEST_KILL_AT_TASK", "-u", "ANSIBLE_CALLBACK_PLUGINS",
              program("ansible-playbook")] + inventory_args(INVENTORY) + ["deploy.yml"]
    run, said = faulted_playbook("deploy.yml", "Compare what this run would deploy with the last verified rollout",
                                 second, in_play="Plan the rollout")
    assert run.rc == 0, run.summary()
    assert not said.startswith("0\n") and "Another run is deploying; nothing was changed." in said, said[-3000:]
    for host in HOSTS:
        assert "%s: run " % host in said and "is still running" in said, said[-3000:]
    assert sorted(path.name for path in LEASES.iterdir() if not path.name.endswith(".lock")) == []
    assert run.changed_tasks() == []
    # The plan found nothing to deploy: both containers were only verified, in parallel, none entered the cutover.
    plan = json.loads((REPORTS / "rollout-plan.json").read_text())
    assert {host: plan[host]["cutover"] for host in HOSTS} == {host: False for host in HOSTS}, plan
    assert rolled_out(run) == []
    stats = run.stats
    assert set(HOSTS) | {NODE} <= set(stats)
    assert all(host_stats["changed"] == 0 and host_stats["failures"] == 0 for host_stats in stats.values()), stats
    # Not restarted: the same invocation serves.
    assert dict((host, unit_state(host)) for host in HOSTS) == before


def test_verify_playbook_passes_on_what_runs(sandbox):
    run = playbook("playbooks/verify.yml")
    assert run.rc == 0, run.summary()
    assert run.changed_tasks() == []
    for host in HOSTS:
        assert summary(host)["status"] == "passed"
        assert summary(host)["since_last_verification"]["message"] == "No reboot or restart since the last verification."


def boot_check():
    """What systemd runs before pve-guests at the node's boot: the installed unit's ExecStart (the sandbox's paths need
    no systemd unquoting). The sandbox node is this machine, whose PID 1 is not systemd."""
    unit = (SANDBOX / "node-root/etc/systemd/system/llmops-gpu-boot-check.service").read_text()
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return subprocess.run(line[len("ExecStart="):].split(), capture_output=True, text=True, timeout=120, check=False)


def test_after_a_node_reboot_the_verification_says_whether_the_containers_came_back_with_their_gpus(sandbox):
    # The node reboots: the guests stop, the uvm nodes are gone until something loads nvidia-uvm, a new boot ID.
    for host in HOSTS:
        container_status(host, "stop")
    faults = sim_cli("gpu-fault", "--root", SANDBOX / "gpu-kit", "add", "rebooted")
    assert faults.returncode == 0, faults.stderr
    assert not os.path.exists("/dev/nvidia-uvm")
    # A node whose boot check did not run (disabled, or the role never ran): the guests start without the uvm node.
    for host in HOSTS:
        container_status(host, "start")
    run = playbook("playbooks/verify.yml")
    assert run.rc != 0
    for host in HOSTS:
        verdict = summary(host)
        assert verdict["status"] == "failed"
        since = verdict["since_last_verification"]
        assert since["node_rebooted"] and since["gpus_back"] is False, since
        assert ("Since the last verification the node rebooted (boot %s at the last verification, "
                % since["last_boot"]["boot_id"]) in verdict["message"], verdict["message"]
        assert "the container did not come back with its GPUs." in verdict["message"]
        assert "uvm_node" in verdict["message"] and "nvidia-uvm" in verdict["message"], verdict["message"]

    # The boot check makes the nodes (what it does at boot, before pve-guests); the guests start again with them.
    check = boot_check()
    assert check.returncode == 0, check.stdout + check.stderr
    assert "created /dev/nvidia-uvm, /dev/nvidia-uvm-tools" in check.stdout
    for host in HOSTS:
        container_status(host, "reboot")
    run = playbook("playbooks/verify.yml")
    assert run.rc == 0, run.summary()
    for host in HOSTS:
        since = summary(host)["since_last_verification"]
        # Against the failed verification: the same boot, the container restarted, back with its GPUs.
        assert (since["node_rebooted"], since["container_restarted"], since["gpus_back"]) == (False, True, True), since
        assert since["message"].endswith("the container came back with its GPUs."), since
        assert summary(host)["status"] == "passed"


def container_status(host, action):
    """Reboot or stop a container through the simulator's API (what the Proxmox UI's buttons do), waiting for the task."""
    PVE_SIM.endpoint = json.loads((PVE_SIM.state / "endpoint.json").read_text())
    api = PVE_SIM.api()
    wait_task(api, getattr(api.nodes(NODE).lxc(CONTAINERS[host]["vmid"]).status, action).post())


def reboot(host):
    container_status(host, "reboot")


def test_a_gpu_taken_from_a_container_by_hand_is_named_by_the_next_verification(sandbox):
    host = "llm-qwen-b"
    gpu = kit_gpus()[HOSTS[host]["gpus"][1]]
    config = PVE_SIM.conf_path(HOSTS[host]["vmid"])
    line = "lxc.mount.entry: /dev/nvidia%d dev/nvidia%d none bind,optional,create=file\n" % (gpu["minor"], gpu["minor"])
    assert line in config.read_text()
    config.write_text(config.read_text().replace(line, ""))
    reboot(host)
    run = playbook("playbooks/verify.yml", "--limit", host)
    assert run.rc != 0
    said = " ".join(run.failures())
    assert ("the container cannot use the GPUs of this deployment: %s (the host's GPU %d, /dev/nvidia%d) is not usable here: "
            "its device node is not in the container" % (gpu["uuid"], gpu["index"], gpu["minor"])) in said, said
    assert summary(host)["status"] == "failed"
    # The next deploy passes it again (and restarts the container for it); the server verifies on both GPUs.
    run = playbook("deploy.yml", "--limit", host)
    assert run.rc == 0, run.summary() + (REPORTS / "rollout-plan.json").read_text()
    assert line in config.read_text()
    assert summary(host)["status"] == "passed" and [held["uuid"] for held in summary(host)["gpus"]][1] == gpu["uuid"]


def test_a_server_onto_gpus_in_use_is_refused_before_any_change_and_with_sharing_the_plan_names_the_other(sandbox):
    before = dict((host, (unit_state(host), PVE_SIM.conf_path(settings["vmid"]).read_text())) for host, settings in HOSTS.items())
    # llm-qwen-b configured onto llm-qwen-a's GPUs (by index, in another order); a keeps its own.
    onto_a = {"pve_container_gpus": "{{ [1, 0] if inventory_hostname == 'llm-qwen-b' else [0, 1] }}"}
    run = playbook("deploy.yml", "-e", json.dumps(onto_a))
    assert run.rc != 0
    said = " ".join(run.failures())
    first = kit_gpus()[0]
    assert ("The GPU assignment cannot be made: GPU 0 (%s) of pve1 is assigned to llm-qwen-a and llm-qwen-b: a "
            "GPU serves one server unless every container that gets it sets pve_container_gpus_shared" % first["uuid"]) in said, said
    assert dict((host, (unit_state(host), PVE_SIM.conf_path(settings["vmid"]).read_text())) for host, settings in HOSTS.items()) == before
    # Sharing allowed on both: the memory plan counts the other server's share and names it (check mode: no change).
    run = playbook("deploy.yml", "--check", "-e", json.dumps(dict(onto_a, pve_container_gpus_shared=True)))
    assert run.rc != 0
    said = " ".join(run.failures())
    assert "The memory plan refuses this configuration" in said and "shared GPUs: llm-qwen-a (mem_fraction_static default)" in said, said
    assert dict((host, (unit_state(host), PVE_SIM.conf_path(settings["vmid"]).read_text())) for host, settings in HOSTS.items()) == before


def test_check_diff_shows_a_change_and_changes_nothing(sandbox):
    unit_path = "/etc/systemd/system/sglang-qwen36.service"
    before = inside("llm-qwen-a", "sha256sum", unit_path)
    states = dict((host, unit_state(host)) for host in HOSTS)
    run = playbook("deploy.yml", "--check", "--diff", "--limit", "llm-qwen-a", "-e", "sglang_service_max_running_requests=3")
    assert run.rc == 0, run.summary()
    diffs = [item.result.get("diff") for item in run.results
             if item.task.endswith("Install the systemd unit (validated with systemd-analyze verify)") and item.result.get("changed")]
    assert diffs, run.changed_tasks()
    assert "--max-running-requests 3" in json.dumps(diffs)
    # The memory plan for the changed flags is shown before anything would change.
    shown = [item.result.get("msg") for item in run.results if item.task.endswith("Show the memory plan")]
    assert shown and "serves 3 of 3 requested running requests; the KV pool holds " in json.dumps(shown), shown
    assert inside("llm-qwen-a", "sha256sum", unit_path) == before
    assert dict((host, unit_state(host)) for host in HOSTS) == states


def assert_stopped_at_the_first_container(run):
    """The run failed at llm-qwen-a's cutover: one "Stop the rollout" names it and the container not rolled out."""
    assert run.rc != 0
    stop = [item.result["msg"] for item in run.results if item.task.endswith("Stop the rollout") and item.result.get("failed")]
    assert len(stop) == 1, run.failures()
    assert "Rollout stopped at llm-qwen-a (CT 201 on pve1)" in stop[0]
    assert "Not rolled out: llm-qwen-b" in stop[0]


def test_bad_change_is_rolled_back_and_stops_the_rollout(sandbox):
    good = dict((host, record(host)) for host in HOSTS)
    untouched = unit_state("llm-qwen-b")
    # A server that starts, answers /health and the sampled probe, and is still wrong: speculation that changes greedy
    # tokens after the fourth. Only the canaries see it (the greedy reference the first deploy recorded).
    bad = {"sglang_service_environment": dict(SANDBOX_ENVIRONMENT, SGLANG_SIM_FAULT="wrong-drafts")}
    extra = SANDBOX / "bad-change.json"
    extra.write_text(json.dumps(bad))
    served_by_b = served_requests("llm-qwen-b")
    # Under load through the router: the failing container is out of the router from before its change until its
    # previous deployment verified again; the other serves meanwhile.
    with RouterLoad() as load:
        run = playbook("deploy.yml", "-e", "@%s" % extra)
    assert_stopped_at_the_first_container(run)
    canary = [failure for failure in run.failures() if failure.startswith("Run the canaries on llm-qwen-a")]
    # Deterministic drafts agree with themselves, so only the reference the healthy deployment recorded sees it.
    assert canary and "greedy_reference" in canary[0] and "token 4 differs from the reference" in canary[0], run.failures()
    print("\nfailed cutover behind the router: %d requests, %d failed %s" % (load.sent, len(load.errors), load.errors[:5]))
    assert load.errors == [], load.errors[:10]
    wait_until(lambda: served_requests("llm-qwen-b") > served_by_b, 60, "llm-qwen-b's log to show requests")
    status, listing = router_request("/workers")
    assert sorted(worker["url"] for worker in listing["workers"]) == ROUTER_WORKERS, listing
    report = json.loads((REPORTS / "rollout-llm-qwen-a.json").read_text())
    assert report["rollback"]["status"] == "passed", report
    assert report["rollback"]["deployment_id"] == good["llm-qwen-a"]["deployment_id"]
    assert report["rollback"]["rolled_back_from"] == report["failed_deployment_id"] != good["llm-qwen-a"]["deployment_id"]
    assert report["not_rolled_out"] == ["llm-qwen-b"]
    # The first container runs its previous deployment again, verified; nothing of the bad one is left in the unit.
    assert record("llm-qwen-a")["deployment_id"] == good["llm-qwen-a"]["deployment_id"]
    assert summary("llm-qwen-a")["status"] == "passed"
    assert summary("llm-qwen-a")["deployment_id"] == good["llm-qwen-a"]["deployment_id"]
    assert "SGLANG_SIM_FAULT" not in inside("llm-qwen-a", "cat", "/etc/systemd/system/sglang-qwen36.service")
    # The second container was never touched: same record, same invocation.
    assert record("llm-qwen-b") == good["llm-qwen-b"]
    assert unit_state("llm-qwen-b") == untouched
    # The restored deployment is what the inventory describes: a plain rerun has nothing to do.
    run = playbook("deploy.yml")
    assert run.rc == 0, run.summary()
    assert run.changed_tasks() == []


def running_sglang(host):
    """(environment, installed sglang version) of the process the unit runs: its program's virtualenv, asked there."""
    argv = inside(host, "cat", "/proc/%s/cmdline" % unit_state(host)["MainPID"]).split("\0")
    program = next(arg for arg in argv if arg.endswith("/bin/sglang-sim"))
    env_bin = os.path.dirname(program)
    version = inside(host, env_bin + "/python", "-c", "import importlib.metadata as m; print(m.version('sglang'))").strip()
    return os.path.dirname(env_bin), version


def test_a_package_upgrade_that_fails_verification_is_rolled_back_with_its_packages(sandbox):
    # The mirror's 0.5.23.post1 stand-in is a release that cannot start on these GPUs (the simulator's startup OOM).
    good = dict((host, record(host)) for host in HOSTS)
    untouched = unit_state("llm-qwen-b")
    before = dict((host, running_sglang(host)) for host in HOSTS)
    assert [version for _env, version in before.values()] == ["0.5.23+standin"] * len(HOSTS), before
    extra = SANDBOX / "package-upgrade.json"
    extra.write_text(json.dumps({"sglang_version": "0.5.23.post1"}))
    # Check mode shows the install and the unit that would run the new environment, and installs nothing.
    run = playbook("deploy.yml", "--check", "--diff", "--limit", "llm-qwen-a", "-e", "@%s" % extra)
    assert run.rc == 0, run.summary()
    would = [item.result.get("msg") for item in run.results if item.task.endswith("Report the install that would run")]
    assert would and "sglang==0.5.23.post1" in would[0], would
    diffs = [item.result.get("diff") for item in run.results
             if item.task.endswith("Install the systemd unit (validated with systemd-analyze verify)") and item.result.get("changed")]
    assert diffs and "/opt/sglang/envs/0.5.23.post1-" in json.dumps(diffs), run.changed_tasks()
    assert "0.5.23.post1" not in inside("llm-qwen-a", "ls", "/opt/sglang/envs")
    assert unit_state("llm-qwen-b") == untouched
    # The site mirror down during the change (its export gone: the mount point is there, empty): the staging fails on
    # both containers naming the package and where it was looked for, before any container changes; both servers run
    # on, same process, same deployment, answering (issue 30).
    running = dict((host, unit_state(host)) for host in HOSTS)
    wheels, away = SANDBOX / "mirror" / "wheels", SANDBOX / "mirror" / "wheels.away"
    wheels.rename(away)
    wheels.mkdir()
    try:
        run = playbook("deploy.yml", "-e", "@%s" % extra)
    finally:
        wheels.rmdir()
        away.rename(wheels)
    assert run.rc != 0
    failures = run.failures()
    said = " ".join(failures)
    assert "sglang==0.5.23.post1 from find-links /srv/llmops-mirror/wheels, no index with" in said, failures
    assert sorted(set(item.host for item in run.results if item.task.endswith("Fail with the installer's own words")
                      and item.result.get("failed"))) == sorted(HOSTS), failures
    assert not [item for item in run.results if item.play == "Roll out the servers, one batch of containers at a time"]
    for host in HOSTS:
        assert unit_state(host) == running[host] and record(host) == good[host] and running_sglang(host) == before[host]
    status, answer = router_request("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 4}})
    assert status == 200 and answer["text"], answer
    run = playbook("deploy.yml", "-e", "@%s" % extra)
    assert_stopped_at_the_first_container(run)
    # Staged on both containers, in parallel, beside the running environment.
    staged = dict((item.host, item.result["ansible_facts"]["sglang_venv"]) for item in run.results
                  if item.task.endswith("Publish the virtualenv this request installs into")
                  and item.play == "Stage SGLang on the containers that cut over")
    assert sorted(staged) == sorted(HOSTS), staged
    for host, env in staged.items():
        assert env != before[host][0] and "/0.5.23.post1-" in env, (env, before)
        assert inside(host, env + "/bin/python", "-c", "import sglang; print(sglang.__version__)").strip() == "0.5.23.post1+standin"
    report = json.loads((REPORTS / "rollout-llm-qwen-a.json").read_text())
    assert report["rollback"]["status"] == "passed", report
    assert report["rollback"]["deployment_id"] == good["llm-qwen-a"]["deployment_id"]
    # The first container runs its previous SGLang again, from its previous environment, verified.
    assert running_sglang("llm-qwen-a") == before["llm-qwen-a"]
    assert record("llm-qwen-a")["deployment_id"] == good["llm-qwen-a"]["deployment_id"]
    assert record("llm-qwen-a")["inputs"]["package_environment"] == before["llm-qwen-a"][0]
    assert summary("llm-qwen-a")["status"] == "passed"
    # The second: never cut over. Same record, same process, same packages.
    assert record("llm-qwen-b") == good["llm-qwen-b"]
    assert unit_state("llm-qwen-b") == untouched
    assert running_sglang("llm-qwen-b") == before["llm-qwen-b"]
    # The inventory's release is what runs: a plain rerun has nothing to do.
    run = playbook("deploy.yml")
    assert run.rc == 0, run.summary()
    assert run.changed_tasks() == []


def test_incident_replay_names_the_stray_and_a_deploy_recovers(sandbox):
    host = "llm-qwen-a"
    inside(host, "systemctl", "stop", "sglang-qwen36.service")
    # The incident's relaunch: by hand, over a shell, with nohup, on the service's port. lxc-attach may stay until every
    # process it started lets go of the terminal, so it is not waited for beyond a few seconds. The served model name
    # marks the stray so that the cleanup below can find it whatever its PID.
    argv, env = sim_command("pct", "--state-dir", PVE_SIM.state, "exec", HOSTS[host]["vmid"], "--", "bash", "-c",
                            "cd /tmp && nohup /opt/sglang/envs/0.5.23-*/bin/sglang-sim --model-path /models/Qwen3.6-27B "
                            "--served-model-name stray-relaunch --port 30000 --tp-size 2 --speculative-algorithm NEXTN "
                            "> /tmp/nohup-relaunch.log 2>&1 < /dev/null &")
    launch = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                              stderr=subprocess.DEVNULL)
    try:
        launch.wait(timeout=15)
    except subprocess.TimeoutExpired:
        launch.kill()
        launch.wait(timeout=15)
    try:
        # The stray is the process that listens on the port (what an operator would find with ss).
        stray = None
        deadline = time.monotonic() + 60
        while stray is None and time.monotonic() < deadline:
            listening = pct(HOSTS[host]["vmid"], "ss", "-Hltnp", "sport = :30000").stdout
            if "pid=" in listening:
                stray = int(listening.split("pid=", 1)[1].split(",", 1)[0])
            else:
                time.sleep(1)
        assert stray is not None, "the stray never listened on port 30000: %s" % inside(host, "cat", "/tmp/nohup-relaunch.log")
        run = playbook("playbooks/verify.yml", "--limit", host)
        assert run.rc != 0
        messages = " ".join(run.failures())
        assert "port 30000 is held by PID %d" % stray in messages, messages
        assert summary(host)["status"] == "failed"
        # The container's GPU preflight names the stray's GPU memory too: held by processes of no service unit.
        assert "The container's GPU preflight found: ERROR gpu_memory_without_unit" in summary(host)["message"], summary(host)["message"]
        assert "belongs to no service unit" in messages, messages
    finally:
        pct(HOSTS[host]["vmid"], "pkill", "-9", "-f", "stray-relaunch")
    # Meanwhile llm-qwen-b's container was stopped from the Proxmox UI (issue 30): the same deploy starts it, and its
    # server comes back under systemd on the same deployment, in a new invocation, verified.
    other = "llm-qwen-b"
    other_before, other_deployment = unit_state(other), record(other)["deployment_id"]
    container_status(other, "stop")
    assert pct(HOSTS[other]["vmid"], "true").returncode != 0, "the stopped container still runs commands"
    run = playbook("deploy.yml", "--limit", "%s,%s" % (host, other))
    assert run.rc == 0, run.summary()
    assert summary(host)["status"] == "passed"
    assert summary(host)["deployment_id"] == record(host)["deployment_id"]
    after = unit_state(other)
    assert after["ActiveState"] == "active" and after["InvocationID"] != other_before["InvocationID"], after
    assert record(other)["deployment_id"] == other_deployment == summary(other)["deployment_id"]
    assert running_deployment(other) == other_deployment and summary(other)["status"] == "passed"


def test_an_unchanged_server_that_fails_its_verification_stops_the_run_before_any_change(sandbox):
    # The unchanged servers verify at their own pace (strategy free), so the run must stop after them: a's threshold is
    # a verify-only variable (not part of a deployment), so a stays unchanged and fails. First with a change for b,
    # which must not be touched (every unchanged server failed: ansible ends the run after the play); then with b
    # unchanged and passing, where the gate play names a.
    before = dict((host, unit_state(host)) for host in HOSTS)
    deployments = dict((host, record(host)["deployment_id"]) for host in HOSTS)
    change = OVERLAY / "sandbox-test-change.yml"
    failing_a = "    llm-qwen-a:\n      sglang_verify_min_accept_length: 99\n"
    change.write_text("---\nall:\n  hosts:\n" + failing_a + "    llm-qwen-b:\n      sglang_service_max_running_requests: 3\n")
    try:
        run = playbook("deploy.yml")
    finally:
        change.unlink()
    assert run.rc != 0
    plan = json.loads((REPORTS / "rollout-plan.json").read_text())
    assert not plan["llm-qwen-a"]["cutover"] and plan["llm-qwen-b"]["cutover"], plan
    messages = " ".join(run.failures())
    assert "Check the speculative decoding stats against the thresholds on llm-qwen-a" in messages, messages
    assert summary("llm-qwen-a")["status"] == "failed"
    assert rolled_out(run) == [] and not any(item.play == STAGING_PLAY for item in run.results)
    assert dict((host, unit_state(host)) for host in HOSTS) == before
    assert dict((host, record(host)["deployment_id"]) for host in HOSTS) == deployments

    change.write_text("---\nall:\n  hosts:\n" + failing_a)
    try:
        run = playbook("deploy.yml")
    finally:
        change.unlink()
    assert run.rc != 0
    messages = " ".join(run.failures())
    assert "llm-qwen-a failed the verification of their unchanged deployment" in messages, messages
    assert summary("llm-qwen-b")["status"] == "passed"
    assert dict((host, unit_state(host)) for host in HOSTS) == before


# The fault tests' kill switch: a callback that SIGKILLs ansible-playbook's process group when a named task starts.
KILL_SWITCH = REPO / "tests" / "support" / "callback_plugins"


def killed_playbook(name, task, *args, timeout=900, in_play=""):
    """Run a playbook that is SIGKILLed (its whole process group, as when the operator's machine dies) when the task or
    handler called ``task`` is about to start (in the play called ``in_play``, when given); fails unless it died exactly
    there."""
    mark = SANDBOX / "killed-at"
    if mark.exists():
        mark.unlink()
    environment = ansible_environment({"ANSIBLE_CALLBACK_PLUGINS": str(KILL_SWITCH), "LLMOPS_TEST_KILL_AT_TASK": task,
                                       "LLMOPS_TEST_KILL_MARK": str(mark), "LLMOPS_TEST_KILL_IN_PLAY": in_play})
    argv = [program("ansible-playbook")] + inventory_args(INVENTORY) + [name] + list(args)
    finished = subprocess.run(argv, cwd=str(REPO), env=run_env(environment), capture_output=True, text=True,
                              timeout=timeout, check=False, start_new_session=True)
    assert finished.returncode == -signal.SIGKILL and mark.exists(), (
        "%s was not killed at %r (rc %s): %s" % (name, task, finished.returncode, finished.stdout[-3000:] + finished.stderr[-2000:]))


def faulted_playbook(name, task, argv, *args, in_play="", timeout=900):
    """Run a playbook that runs ``argv`` on this machine when the task ``task`` (in the play ``in_play``) is about to
    start, once, waiting for it; the run goes on. (AnsibleRun, the command's exit status and output)."""
    mark = SANDBOX / "fault-done"
    if mark.exists():
        mark.unlink()
    environment = ansible_environment({"ANSIBLE_CALLBACK_PLUGINS": str(KILL_SWITCH), "LLMOPS_TEST_KILL_AT_TASK": task,
                                       "LLMOPS_TEST_KILL_MARK": str(mark), "LLMOPS_TEST_KILL_IN_PLAY": in_play,
                                       "LLMOPS_TEST_RUN_ARGV": json.dumps([str(item) for item in argv])})
    run = ansible_playbook(name, *args, inventory=INVENTORY, cwd=str(REPO), timeout=timeout, environment=environment)
    assert mark.exists(), "the fault never ran: %s" % run.summary()
    return run, mark.read_text()


ROLLOUT_PLAY = "Roll out the servers, one batch of containers at a time"


def test_a_server_killed_between_its_restart_and_its_verification_never_passes_dead(sandbox):
    # A change for llm-qwen-a alone; right after its restart, before its verification, its server is SIGKILLed (every
    # process of the unit, as the OOM killer or an operator might). systemd restarts it after RestartSec (10 s). The
    # verification must not pass for the dead process: it fails naming the exit and the rollout rolls back, or (on a
    # machine so slow that the restart came first) it verifies the restarted process, alive, under a new invocation.
    host = "llm-qwen-a"
    good = dict((name, record(name)) for name in HOSTS)
    untouched = unit_state("llm-qwen-b")
    change = OVERLAY / "sandbox-test-change.yml"
    change.write_text("---\nall:\n  hosts:\n    %s:\n      sglang_service_max_running_requests: 3\n" % host)
    argv, env = sim_command("pct", "--state-dir", PVE_SIM.state, "exec", CONTAINERS[host]["vmid"], "--", "systemctl", "kill",
                            "--signal=SIGKILL", "sglang-%s.service" % CONTAINERS[host]["instance"])
    kill = ["env", "PYTHONPATH=" + env["PYTHONPATH"]] + argv
    try:
        run, done = faulted_playbook("deploy.yml", "Wait for the current invocation to be ready", kill, in_play=ROLLOUT_PLAY)
    finally:
        change.unlink()
    assert done.startswith("0\n"), done
    after = unit_state(host)
    verdict = summary(host)
    if run.rc != 0:
        said = " ".join(run.failures())
        assert "sglang-%s.service exited before it became ready" % CONTAINERS[host]["instance"] in said, said
        report = json.loads((REPORTS / ("rollout-%s.json" % host)).read_text())
        assert report["rollback"]["status"] == "passed", report
        assert record(host)["deployment_id"] == good[host]["deployment_id"] and verdict["status"] == "passed"
    else:
        assert verdict["status"] == "passed" and record(host)["deployment_id"] != good[host]["deployment_id"]
    # Whichever: what the summary calls verified is the process that runs now.
    assert after["ActiveState"] == "active" and str(verdict["main_pid"]) == after["MainPID"], (verdict, after)
    assert verdict["invocation_id"] == after["InvocationID"]
    assert unit_state("llm-qwen-b") == untouched and record("llm-qwen-b") == good["llm-qwen-b"]
    if run.rc == 0:
        # Back to the inventory's configuration for the tests after this one.
        again = playbook("deploy.yml", "--limit", host)
        assert again.rc == 0, again.summary()


def running_deployment(host):
    """LLMOPS_DEPLOYMENT_ID of the process the host's unit runs."""
    environ = inside(host, "cat", "/proc/%s/environ" % unit_state(host)["MainPID"]).split("\0")
    return [item.split("=", 1)[1] for item in environ if item.startswith("LLMOPS_DEPLOYMENT_ID=")][0]


def archived(host):
    return sorted(inside(host, "ls", "/var/lib/llmops-serving/%s/deployments" % CONTAINERS[host]["instance"]).split())


def test_a_change_for_one_container_cuts_over_only_that_one(sandbox):
    # Last before the teardown: it leaves llm-qwen-b on a configuration the inventory does not describe. The change
    # is an inventory variable of b alone (an inventory file beside hosts.yml, removed afterwards). Its rollout is
    # killed five times first (issue 30), each run going further: during the plan, during staging, after the new
    # deployment was recorded and before the restart (the handler never fires), right after the restart that the next
    # run makes from what runs, and during the new server's verification; the sixth run completes it.
    before = dict((host, unit_state(host)) for host in HOSTS)
    deployments = dict((host, record(host)["deployment_id"]) for host in HOSTS)
    # A shard of b's model damaged in place (same size, same time of day: only its hash tells): the cutover's model
    # check finds it, removes it and hf fetches that file again, nothing else.
    _commit, files = hub_model()
    shard = "model-00002-of-00004.safetensors"
    inside("llm-qwen-b", "dd", "if=/dev/zero", "of=%s/%s" % (MODEL_DIR, shard), "bs=1", "seek=4096", "count=16",
           "conv=notrunc", "status=none")
    assert model_hashes("llm-qwen-b", [shard])[shard] != files[shard]
    requests_before = len(hub_requests())
    change = OVERLAY / "sandbox-test-change.yml"
    change.write_text("---\nall:\n  hosts:\n    llm-qwen-b:\n      sglang_service_max_running_requests: 3\n")
    try:
        # The plan and the staging write nothing that the server runs: b keeps its deployment, its record and its process.
        killed_playbook("deploy.yml", "Put the container in its part of the rollout")
        assert record("llm-qwen-b")["deployment_id"] == deployments["llm-qwen-b"] and unit_state("llm-qwen-b") == before["llm-qwen-b"]
        killed_playbook("deploy.yml", "Decide whether to run the installer", in_play="Stage SGLang on the containers that cut over")
        assert record("llm-qwen-b")["deployment_id"] == deployments["llm-qwen-b"] and unit_state("llm-qwen-b") == before["llm-qwen-b"]
        killed_playbook("deploy.yml", "Restart the SGLang service")
        recorded = record("llm-qwen-b")["deployment_id"]
        assert recorded != deployments["llm-qwen-b"] and unit_state("llm-qwen-b") == before["llm-qwen-b"]
        assert running_deployment("llm-qwen-b") == deployments["llm-qwen-b"]
        # The next run's record is unchanged; what runs says that the unit must restart, and it does, once.
        killed_playbook("deploy.yml", "Enable and start the service")
        restarted = unit_state("llm-qwen-b")
        assert restarted["InvocationID"] != before["llm-qwen-b"]["InvocationID"]
        assert running_deployment("llm-qwen-b") == recorded
        # Killed while the new server is verified: it runs, unverified; the next run verifies it without a restart.
        killed_playbook("deploy.yml", "Run the canaries", in_play="Roll out the servers, one batch of containers at a time")
        assert unit_state("llm-qwen-b") == restarted and running_deployment("llm-qwen-b") == recorded
        run = playbook("deploy.yml")
        assert run.rc == 0, run.summary()
        # Each killed run left its deploy leases; each next run took them over (their ansible-playbook was gone).
        taken = run.task_results("Take the container's deploy lease")
        assert [result.get("holder_state") for result in taken] == ["gone"] * len(HOSTS), taken
        assert sorted(path.name for path in LEASES.iterdir() if not path.name.endswith(".lock")) == []
        plan = json.loads((REPORTS / "rollout-plan.json").read_text())
        assert unit_state("llm-qwen-b") == restarted, "the restart was repeated"
        assert record("llm-qwen-b")["deployment_id"] == recorded and summary("llm-qwen-b")["deployment_id"] == recorded
        # Nothing dropped or half-written: both deployments archived (the rollback has its target), no staging left.
        assert {deployments["llm-qwen-b"], recorded} <= set(archived("llm-qwen-b"))
        assert not [name for name in archived("llm-qwen-b") if name.endswith(".partial")]
        # And the run after it changes nothing on b.
        again = playbook("deploy.yml", "--limit", "llm-qwen-b")
        assert again.rc == 0 and again.changed_tasks() == [] and unit_state("llm-qwen-b") == restarted, again.summary()
    finally:
        change.unlink()
    requests = hub_requests()[requests_before:]
    assert fetched(requests, "llm-qwen-b") == [shard] and fetched(requests, "llm-qwen-a") == []
    assert model_hashes("llm-qwen-b", sorted(files)) == files
    # The third run's reason for b: its record changed since the last verified rollout (the killed runs recorded it).
    assert plan["llm-qwen-b"]["cutover"] and plan["llm-qwen-b"]["reasons"], json.dumps(plan["llm-qwen-b"])
    assert not plan["llm-qwen-a"]["cutover"], json.dumps(plan["llm-qwen-a"])
    assert rolled_out(run) == ["llm-qwen-b"]
    assert unit_state("llm-qwen-a") == before["llm-qwen-a"]
    assert record("llm-qwen-a")["deployment_id"] == deployments["llm-qwen-a"]
    assert record("llm-qwen-b")["deployment_id"] != deployments["llm-qwen-b"]
    assert summary("llm-qwen-b")["status"] == "passed"


def server_argv(host):
    """The command line of the process systemd runs for the host's instance (its MainPID)."""
    pid = unit_state(host)["MainPID"]
    return inside(host, "cat", "/proc/%s/cmdline" % pid).split("\0")


def hf_running(host):
    """PIDs of the hf downloads running in the host (the interpreter running hf, not timeout around it)."""
    found = pct(CONTAINERS[host]["vmid"], "pgrep", "-f", "python[0-9.]* [^ ]*/bin/hf download")
    return found.stdout.split() if found.returncode == 0 else []


def interrupt_the_download(host):
    """Run deploy.yml with the hub at its slowest (4 KiB/s per transfer: a shard takes minutes), Ctrl-C it once hf
    has begun a file in the host's model directory (the signal goes to ansible-playbook's process group, as a
    terminal's does). The hub stays slow. The files already whole then (hf wrote their .metadata) and the PIDs of the
    hf still running there."""
    faults = HUB / "faults.json"
    faults.write_text(json.dumps({"bytes_per_second": 4096}))
    argv = [program("ansible-playbook")] + inventory_args(INVENTORY) + ["deploy.yml"]
    process = subprocess.Popen(argv, cwd=str(REPO), env=run_env(ansible_environment(None)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    download = MODEL_DIR + "/.cache/huggingface/download"
    try:
        def started():
            if process.poll() is not None:
                pytest.fail("deploy.yml ended (rc %s) before hf ran in %s" % (process.returncode, host))
            listed = pct(CONTAINERS[host]["vmid"], "sh", "-c", "ls %s 2>/dev/null | grep -c incomplete" % download)
            return hf_running(host) and listed.stdout.strip() not in ("", "0")
        wait_until(started, timeout=900, what="hf downloading into %s" % host)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
    listed = pct(CONTAINERS[host]["vmid"], "find", download, "-name", "*.metadata", "-printf", "%P\n")
    whole = [line[:-len(".metadata")] for line in listed.stdout.split()]
    return {"whole": whole, "leftover": hf_running(host)}


def test_a_model_across_two_containers_runs_one_deployment_and_names_a_stopped_node(sandbox):
    # After the other tests: two more containers run ONE model (TP 4, two ranks each), node rank 0 behind the router.
    # As `make sandbox SANDBOX_MODEL_NODES=2 SANDBOX_MODEL_NODES_DEBIAN=12` prepares it: the inventory's two more
    # containers, on Debian 12 (PVE 8's template) beside the example's Debian 13 ones, and the GPU kit's four more GPUs.
    made = sandbox_script("prepare", timeout=900, settings={"SANDBOX_MODEL_NODES": "2", "SANDBOX_MODEL_NODES_DEBIAN": "12"})
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert len(kit_gpus()) == 8
    # The first deploy of the new containers is interrupted as an operator does (Ctrl-C) while hf downloads the model
    # into llm-qwen-c, slowly: the hf in the container goes on writing; the next run stops it,
    # removes its partial files and downloads only the files that are not already whole.
    interrupted = interrupt_the_download("llm-qwen-c")
    assert interrupted["leftover"], "the interrupted run's hf must still run in llm-qwen-c for this test"
    requests_before = len(hub_requests())
    # The hub stays slow until the next run has stopped that hf (else it could finish first), then gets its speed back.
    finished = {}
    rerun = threading.Thread(target=lambda: finished.update(run=playbook("deploy.yml", timeout=1500)))
    rerun.start()
    try:
        wait_until(lambda: not set(interrupted["leftover"]) & set(hf_running("llm-qwen-c")) or not rerun.is_alive(),
                   timeout=900, what="the next run to stop the hf that the interrupted run left in llm-qwen-c")
    finally:
        (HUB / "faults.json").write_text("{}")
        rerun.join(timeout=1600)
    run = finished["run"]
    assert run.rc == 0, run.summary()
    stopped = run.task_results("Stop a download that an interrupted run left running", "llm-qwen-c")
    assert stopped and stopped[0]["changed"] and stopped[0]["stdout"].startswith("Stopped the hf download"), stopped
    _commit, files = hub_model()
    again = fetched(hub_requests()[requests_before:], "llm-qwen-c")
    assert not set(again) & set(interrupted["whole"]), (again, interrupted["whole"])
    assert model_hashes("llm-qwen-c", sorted(files)) == files
    assert {"llm-qwen-c", "llm-qwen-d"} <= set(rolled_out(run))
    # Each container runs its template's Debian and Python, and SGLang's environment was made with that Python.
    for host, (debian, python) in {"llm-qwen-a": ("13", "3.13"), "llm-qwen-c": ("12", "3.11"), "llm-qwen-d": ("12", "3.11")}.items():
        assert inside(host, "sh", "-c", ". /etc/os-release; echo $VERSION_ID").strip() == debian, host
        environments = inside(host, "sh", "-c", "ls -d /opt/sglang/envs/*/lib/python3.*").split()
        assert environments and all(path.endswith("/python%s" % python) for path in environments), (host, environments)
    # One deployment ID on both nodes, each verified in its own part: rank 0 the model, rank 1 its dummy health check.
    rank_0, rank_1 = summary("llm-qwen-c"), summary("llm-qwen-d")
    assert rank_0["status"] == rank_1["status"] == "passed", (rank_0, rank_1)
    assert (rank_0["node_rank"], rank_1["node_rank"]) == (0, 1)
    assert rank_0["probe_verdict"] == "healthy" and rank_1["probe_verdict"] is None
    assert record("llm-qwen-c")["deployment_id"] == record("llm-qwen-d")["deployment_id"] == rank_0["deployment_id"]
    # One deployment for the model records every node's GPUs; each node holds its own.
    node = kit_gpus()
    assert record("llm-qwen-c")["inputs"]["gpus"] == {"llm-qwen-c": [node[4]["uuid"], node[5]["uuid"]],
                                                      "llm-qwen-d": [node[6]["uuid"], node[7]["uuid"]]}
    assert [gpu["index"] for gpu in rank_0["gpus"]] == [4, 5] and [gpu["index"] for gpu in rank_1["gpus"]] == [6, 7]
    argv_0, argv_1 = server_argv("llm-qwen-c"), server_argv("llm-qwen-d")
    for argv, rank in ((argv_0, "0"), (argv_1, "1")):
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--dist-init-addr") + 1] == "10.213.0.13:30190"
        assert argv[argv.index("--node-rank") + 1] == rank
    assert "Dummy health check server started in background thread at 0.0.0.0:30100" in inside(
        "llm-qwen-d", "cat", "/var/log/llmops-serving/qwen36-mn/current.log")
    # The router has the model once, at its node rank 0.
    router = json.loads((REPORTS / ("router-%s.json" % ROUTER_HOST)).read_text())
    assert sorted(router["registered"]) == sorted(ROUTER_WORKERS + ["http://10.213.0.13:30100"]), router
    # Rank 1 stopped by hand: the verification of the model fails on rank 0 and names the node and its rank.
    inside("llm-qwen-d", "systemctl", "stop", "sglang-qwen36-mn.service")
    run = playbook("playbooks/verify.yml", "--limit", "llm-qwen-c,llm-qwen-d")
    assert run.rc != 0, run.summary()
    rank_0, rank_1 = summary("llm-qwen-c"), summary("llm-qwen-d")
    assert rank_0["status"] == "failed" and rank_0["failed_step"] == "Stop when a node of the model is down or on another deployment"
    assert "node rank 1 (llm-qwen-d): " in rank_0["message"] and "is not running" in rank_0["message"], rank_0["message"]
    assert rank_1["status"] == "failed" and "sglang-qwen36-mn.service" in rank_1["message"], rank_1


def test_sandbox_down_removes_what_it_made_and_nothing_else(sandbox):
    links_before = set(LINKS_BEFORE)
    down = sandbox_script("down", timeout=600)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not SANDBOX.exists()
    # The GPU kit's nodes in /dev are gone (none existed before: the fixture refuses a machine with NVIDIA nodes).
    assert not [name for name in os.listdir("/dev") if name.startswith("nvidia")]
    links_after = set(network_links())
    assert "llmsbx0" not in links_after
    # Nothing that existed before the sandbox went away (other bridges, docker0, ...).
    assert links_before <= links_after
    # The firewall rule that let the containers reach each other (br_netfilter under Docker's FORWARD DROP) is gone.
    if shutil.which("iptables"):
        rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True, timeout=30, check=True).stdout
        assert "llmsbx0" not in rules, rules
    # The template cache is shared with other tests and kept.
    assert any((REPO / ".build" / "pve-sim-cache").glob("*.tar.zst"))


def test_on_a_proxmox_ve_8_node_the_example_deploys_on_debian_12_and_verifies():
    # After `down` above: `make sandbox SANDBOX_PVE_RELEASE=8`, as a user whose node still runs Proxmox VE 8 makes it -
    # the same example on a node with PVE 8's version, kernel and defaults, every container on Debian 12 (PVE 8's
    # template, Python 3.11). The tests above ran PVE 9 with Debian 13 (and 12 for the model nodes). Its own sandbox,
    # not the module's: this machine is one node, one sandbox at a time.
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver loaded: the sandbox's GPU kit would replace its /dev/nvidia* nodes")
    if SANDBOX.exists():
        # Selected with the module's sandbox up (-k): that one goes first.
        down = sandbox_script("down", timeout=600)
        assert down.returncode == 0, down.stdout + down.stderr
    release = dict((field, sim_cli("release", "8", "--field", field).stdout.strip()) for field in ("version", "kernel"))
    up = sandbox_script("up", settings={"SANDBOX_PVE_RELEASE": "8"})
    try:
        assert up.returncode == 0, up.stdout[-6000:] + up.stderr[-4000:]
        PVE_SIM.endpoint = json.loads((PVE_SIM.state / "endpoint.json").read_text())
        assert PVE_SIM.api().version.get()["version"] == release["version"]
        # The node's kernel is PVE 8's, and its preflight (the driver against that kernel) found nothing wrong.
        assert (SANDBOX / "gpu-kit" / "proc/sys/kernel/osrelease").read_text().strip() == release["kernel"]
        preflight = json.loads((REPORTS / "preflight-pve1.json").read_text())
        assert (preflight["errors"], preflight["warnings"]) == (0, 0), preflight["summary"]
        node = kit_gpus()
        for host, settings in HOSTS.items():
            report = summary(host)
            assert report["status"] == "passed", report
            assert report["deployment_id"] == record(host)["deployment_id"]
            assert [gpu["uuid"] for gpu in report["gpus"]] == [node[index]["uuid"] for index in settings["gpus"]], report["gpus"]
            assert inside(host, "sh", "-c", ". /etc/os-release; echo $VERSION_ID").strip() == "12", host
            environments = inside(host, "sh", "-c", "ls -d /opt/sglang/envs/*/lib/python3.*").split()
            assert environments and all(path.endswith("/python3.11") for path in environments), (host, environments)
            # The example asks for unprivileged containers; PVE 8's default is privileged, so the role must say so.
            assert inside(host, "cat", "/proc/self/uid_map").split() == ["0", "100000", "65536"]
        router = json.loads((REPORTS / ("router-%s.json" % ROUTER_HOST)).read_text())
        assert router["status"] == "passed" and sorted(router["registered"]) == ROUTER_WORKERS, router
    finally:
        down = sandbox_script("down", timeout=600)
        assert down.returncode == 0, down.stdout + down.stderr
    assert not SANDBOX.exists()
