"""gpu_preflight_checks and preflight_finding: the GPU query (the H200 VM's real rows and its real answer to a field it
does not know), the uvm node against the real /proc/devices, container configs, processes holding GPU memory, the
bounded runner, and the finding's format. Fake trees and configs are synthetic."""
from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import gpu_preflight_checks as checks
from ansible_collections.llmops.serving.plugins.module_utils.preflight_finding import Finding, failure_message, sort_findings, visible
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.preflight_data import H200, captured

H200_NH_FIELDS = ("index", "uuid", "pci.bus_id", "persistence_mode", "pcie.link.gen.current", "pcie.link.gen.max",
                  "pcie.link.width.current", "pcie.link.width.max", "ecc.mode.current", "retired_pages.pending",
                  "remapped_rows.pending", "remapped_rows.failure", "name")
UUID = "GPU-b8c856ad-2dde-7a2f-700f-d3c769c21b63"


def h200_row(**changes):
    """The real H200 row (query-gpu-csv-nh.txt) with a name appended and fields changed (synthetic variants)."""
    values = dict(zip(H200_NH_FIELDS, captured(H200 / "query-gpu-csv-nh.txt").strip().split(", ") + ["NVIDIA H200"]))
    values.update(changes)
    return ", ".join(values[field] for field in H200_NH_FIELDS)


def test_the_real_h200_rows_parse():
    [gpu] = checks.parse_gpu_query(h200_row(), H200_NH_FIELDS)
    assert (gpu["index"], gpu["uuid"], gpu["bus_id"], gpu["name"]) == (0, UUID, "0000:00:06.0", "NVIDIA H200")
    assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}
    assert (gpu["persistence_mode"], gpu["ecc_mode"]) == ("Enabled", "Enabled")
    assert (gpu["retired_pages_pending"], gpu["remapped_rows_pending"], gpu["remapped_rows_failure"]) == (None, False, False)
    assert checks.gpu_findings(gpu) == []


def fake_runner(answers):
    calls = []

    def run(argv, **_kwargs):
        calls.append(list(argv))
        answer = answers.pop(0)
        return dict({"rc": 0, "stdout": "", "stderr": "", "missing": False, "timed_out": False, "truncated": False, "error": None}, **answer)
    run.calls = calls
    return run


def test_an_older_driver_refuses_gpucurrent_and_the_query_falls_back():
    # The H200's real answer to a field it does not know (query-bad-field.txt), with the field this module asks for.
    refusal = captured(H200 / "query-bad-field.txt").replace("no.such.field", "pcie.link.gen.gpucurrent")
    row = "0, %s, 00000000:00:06.0, NVIDIA H200, Enabled, 5, 5, 16, 16, Enabled, [N/A], No, No\n" % UUID
    runner = fake_runner([{"rc": 2, "stdout": refusal}, {"stdout": row}])
    gpus, findings, fields = checks.query_gpus("nvidia-smi", runner)
    assert findings == [] and "pcie.link.gen.current" in fields and gpus[0]["pcie"]["gen_current"] == 5
    assert "pcie.link.gen.gpucurrent" in runner.calls[0][1] and "pcie.link.gen.current," in runner.calls[1][1]


def test_a_missing_or_failing_nvidia_smi_is_an_error_finding():
    _gpus, [missing], _fields = checks.query_gpus("nvidia-smi", fake_runner([{"rc": None, "missing": True, "error": "nvidia-smi: not found"}]))
    assert (missing.check, missing.severity) == ("nvidia_smi_failed", "error") and "not installed" in missing.what
    failing = fake_runner([{"rc": 18, "stdout": "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n"}])
    _gpus, [failed], _fields = checks.query_gpus("nvidia-smi", failing)
    assert "Driver/library version mismatch" in failed.what


@pytest.mark.parametrize("changes, check, severity", [
    ({"persistence_mode": "Disabled"}, "persistence_mode", "warning"),
    ({"ecc.mode.current": "Disabled"}, "ecc_disabled", "warning"),
    ({"remapped_rows.pending": "Yes"}, "row_remap_pending", "error"),
    ({"remapped_rows.failure": "Yes"}, "row_remap_failure", "error"),
    ({"retired_pages.pending": "Yes"}, "retired_pages_pending", "error"),
    ({"pcie.link.width.current": "4"}, "pcie_link_width", "error"),
    ({"pcie.link.width.current": "8"}, "pcie_link_width", "warning"),
    ({"pcie.link.gen.current": "1"}, "pcie_link_speed", "info"),
])
def test_each_gpu_finding_on_a_synthetic_variant_of_the_real_row(changes, check, severity):
    [gpu] = checks.parse_gpu_query(h200_row(**changes), H200_NH_FIELDS)
    [finding] = checks.gpu_findings(gpu)
    assert (finding.check, finding.severity, finding.subject) == (check, severity, "GPU0 0000:00:06.0")
    assert finding.evidence == [h200_row(**changes)]


def test_not_available_values_and_ecc_not_supported_give_no_finding():
    changes = {"ecc.mode.current": "[N/A]", "persistence_mode": "[Not Supported]", "pcie.link.width.current": "N/A"}
    [gpu] = checks.parse_gpu_query(h200_row(**changes), H200_NH_FIELDS)
    assert gpu["ecc_mode"] is None and gpu["pcie"]["width_current"] is None and checks.gpu_findings(gpu) == []


def test_a_name_with_commas_and_truncated_or_hostile_rows():
    text = "0, GPU-1, 00000000:01:00.0, Odd, GPU, Name, Enabled, 4, 4, 16, 16, Enabled, No, No, No\n1, GPU-2, 0000\nx" * 1
    gpus = checks.parse_gpu_query(text + "\n" + "\x1b[2J" * 10, checks.GPU_QUERY_FIELDS)
    assert [gpu["name"] for gpu in gpus] == ["Odd, GPU, Name"]


def test_the_real_proc_devices_and_a_matching_node(tmp_path):
    devices = captured(H200 / "proc-devices.txt")
    assert checks.parse_proc_devices(devices)["nvidia-uvm"] == 238
    node = {"exists": True, "char": True, "major": 238, "minor": 0}  # as the H200's dev-ls.txt shows
    major, findings = checks.uvm_node_findings(devices, node, "/dev/nvidia-uvm", "node")
    assert major == 238 and findings == []


@pytest.mark.parametrize("node, what", [
    ({"exists": False, "char": False, "major": None, "minor": None}, "does not exist"),
    ({"exists": True, "char": False, "major": None, "minor": None}, "not a character device"),
    ({"exists": True, "char": True, "major": 237, "minor": 0}, "has major 237, the loaded module uses 238"),
])
def test_uvm_node_findings(node, what):
    _major, [finding] = checks.uvm_node_findings(captured(H200 / "proc-devices.txt"), node, "/dev/nvidia-uvm", "container")
    assert (finding.check, finding.severity) == ("uvm_node", "error") and what in finding.what


def test_the_uvm_module_not_loaded():
    devices = captured(H200 / "proc-devices.txt").replace("238 nvidia-uvm\n", "")
    major, [finding] = checks.uvm_node_findings(devices, {"exists": False}, "/dev/nvidia-uvm", "node")
    assert major is None and "not loaded" in finding.what and "modprobe nvidia-uvm" in finding.fix


def test_stat_node_reads_a_real_character_device(tmp_path):
    os.symlink("/dev/null", tmp_path / "nvidia-uvm")
    assert checks.stat_node(str(tmp_path / "nvidia-uvm")) == {"exists": True, "char": True, "major": 1, "minor": 3}
    os.symlink("nowhere", tmp_path / "dangling")
    assert checks.stat_node(str(tmp_path / "dangling"))["exists"] is True
    assert checks.stat_node(str(tmp_path / "absent"))["exists"] is False


# Synthetic container configs in PVE's format.
CONFIG_OLD_MAJOR = """arch: amd64
hostname: sglang
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file

[before-upgrade]
lxc.cgroup2.devices.allow: c 508:* rwm
"""


@pytest.mark.parametrize("text, findings", [
    (CONFIG_OLD_MAJOR, 1),
    (CONFIG_OLD_MAJOR.replace("509", "508"), 0),
    ("lxc.cgroup.devices.allow = c *:* rwm\n", 0),
    ("dev0: /dev/nvidia0,gid=44\ndev1: /dev/nvidia-uvm,gid=44\n", 0),
    ("dev1: path=/dev/nvidia-uvm\n", 0),
    ("lxc.cgroup2.devices.allow: a\n", 0),
    ("arch: amd64\n", 1),
])
def test_container_configs_against_the_uvm_major(text, findings):
    found = checks.config_findings("/etc/pve/lxc/105.conf", text, 508)
    assert len(found) == findings
    if found:
        assert (found[0].check, found[0].severity) == ("uvm_major_mismatch", "warning")
        assert "c 508:* rwm" in found[0].fix


def test_the_old_major_is_named_in_the_evidence_and_an_unreadable_config_is_a_warning():
    [finding] = checks.config_findings("/etc/pve/lxc/105.conf", CONFIG_OLD_MAJOR, 508)
    assert "lxc.cgroup2.devices.allow: c 509:* rwm" in finding.evidence and "major 508" in finding.what
    [unreadable] = checks.config_findings("/nope.conf", None, 508)
    assert unreadable.check == "container_config_unreadable" and unreadable.severity == "warning"


def test_compute_apps_the_real_empty_answer_and_synthetic_rows():
    # The H200's real answer with --format=csv is only the header; with noheader it is empty: no process.
    assert checks.parse_compute_apps(captured(H200 / "query-apps.txt")) == []
    apps = checks.parse_compute_apps("4242, %s, 70000, python3 -m sglang, launch_server\n17, %s, [N/A], x\nbad line\n" % (UUID, UUID))
    assert [(app["pid"], app["used_mib"], app["name"]) for app in apps] == [(4242, 70000, "python3 -m sglang, launch_server"), (17, None, "x")]


@pytest.fixture
def proc(tmp_path):
    """Synthetic /proc: a nohup'd server in an SSH session, a unit's server in a PVE container, a v1-only process."""
    for pid, text, argv0 in ((4242, "0::/user.slice/user-0.slice/session-3.scope\n", b"/usr/bin/python3"),
                             (5151, "0::/lxc/105/ns/system.slice/sglang.service\n", b"python3"),
                             (6161, "12:name=systemd:/system.slice/other.service\n4:memory:/x\n", b"x")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
        (tmp_path / str(pid) / "cmdline").write_bytes(argv0 + b"\0")
    return tmp_path


def test_a_process_outside_any_unit_is_an_error_on_a_deployment_gpu(proc):
    gpus = [{"index": 0, "uuid": UUID, "bus_id": "0000:00:06.0"}]
    apps = checks.parse_compute_apps("4242, %s, 70000, python3\n5151, %s, 1000, python3\n6161, %s, 10, x\n9999, %s, 5, gone\n" % ((UUID,) * 4))
    findings = checks.process_findings(apps, gpus, {0}, str(proc))
    by_check = {finding.check: finding for finding in findings}
    assert set(by_check) == {"gpu_memory_without_unit", "gpu_process_unattributed"}
    error = by_check["gpu_memory_without_unit"]
    assert error.severity == "error" and "PID 4242 (python3) holds 70000 MiB" in error.what
    assert "session-3.scope" in error.what and "kill 4242" in error.fix
    assert by_check["gpu_process_unattributed"].severity == "info"
    [other_gpu] = [f for f in checks.process_findings(apps, gpus, {1}, str(proc)) if f.check == "gpu_memory_without_unit"]
    assert other_gpu.severity == "warning"


@pytest.mark.parametrize("path, unit", [("/user.slice/user-0.slice/session-3.scope", None), ("/lxc/105/ns/system.slice/sglang.service", "sglang.service"),
                                        ("/system.slice/docker-abc.scope", None), ("", None), (None, None)])
def test_unit_of(path, unit):
    assert checks.unit_of(path) == unit


def test_resolve_groups_by_uuid_and_index_and_unknown_gpus():
    gpus = [{"index": 0, "uuid": UUID, "bus_id": "0000:00:06.0"}, {"index": 1, "uuid": "GPU-2", "bus_id": "0000:00:07.0"}]
    groups, [unknown] = checks.resolve_groups([{"name": "tp2", "gpus": [UUID.upper(), "1", "0"]}, {"name": "x", "gpus": ["7"]}], gpus)
    assert [(name, [gpu["index"] for gpu in members]) for name, members in groups] == [("tp2", [0, 1]), ("x", [])]
    assert (unknown.check, unknown.severity, unknown.subject) == ("gpu_unknown", "error", "server x")


def test_run_bounded_missing_program_timeout_and_flood():
    missing = checks.run_bounded(["/nonexistent/nvidia-smi"])
    assert missing["missing"] and missing["rc"] is None
    slow = checks.run_bounded([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert slow["timed_out"] and slow["rc"] is None
    flood = checks.run_bounded([sys.executable, "-c", "import sys; sys.stdout.write('x' * 3000000 + 'END')"], limit=100000)
    assert flood["rc"] == 0 and flood["truncated"] and len(flood["stdout"]) < 110000 and flood["stdout"].endswith("END")
    ok = checks.run_bounded([sys.executable, "-c", "print('hello')"])
    assert (ok["rc"], ok["stdout"], ok["truncated"]) == (0, "hello\n", False)


def test_the_finding_format_and_its_order():
    warning = Finding("p2p_path", "warning", "server a", "w", ["line"], "slow", "move")
    error = Finding("uvm_node", "error", "/dev/nvidia-uvm", "missing\x1b[2J", ["\x00\x07" + "y" * 1000] * 10, "fails", "create")
    info = Finding("pcie_link_speed", "info", "GPU0 x", "i")
    assert [finding.check for finding in sort_findings([info, warning, error, warning])] == ["uvm_node", "p2p_path", "pcie_link_speed"]
    record = error.as_dict()
    assert set(record) == {"check", "severity", "subject", "what", "evidence", "consequence", "fix"}
    assert record["what"] == "missing\\x1b[2J" and len(record["evidence"]) == 7 and record["evidence"][-1] == "(4 more lines)"
    assert record["evidence"][0].startswith("\\x00\\x07y") and len(record["evidence"][0]) == 300
    assert error.summary() == "ERROR uvm_node /dev/nvidia-uvm: missing\\x1b[2J; fails -> fix: create"
    assert failure_message([info, warning]) is None
    assert failure_message([error, warning]).splitlines() == ["GPU preflight found 1 error:", "- " + error.summary()]
    with pytest.raises(ValueError):
        Finding("x", "fatal", "s", "w")
    assert visible("a\tb") == "a\tb" and visible("z" * 10 ** 7, 50).endswith("...") and len(visible("z" * 10 ** 7, 50)) == 50


@pytest.mark.parametrize("name, argv0, comm, same", [
    ("python3", b"/usr/bin/python3", None, True),
    ("/usr/bin/python3", b"python3", None, True),
    ("sglang::scheduler_TP0", b"sglang::scheduler_TP0", "sglang::schedul", True),
    ("sglang::scheduler_TP0", None, "sglang::schedul", True),      # cmdline unreadable: the 15-byte comm
    ("python3", b"/usr/sbin/sshd", "sshd", False),                 # another process under the same number
    ("python3", None, None, False),                                # no such process here
    ("[Not Found]", b"/usr/sbin/sshd", "sshd", True),             # nvidia-smi knows no name: the cgroup decides
])
def test_is_same_process(tmp_path, name, argv0, comm, same):
    (tmp_path / "77").mkdir()
    if argv0 is not None:
        (tmp_path / "77" / "cmdline").write_bytes(argv0 + b"\0-x\0")
    if comm is not None:
        (tmp_path / "77" / "stat").write_text("77 (%s) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n" % comm)
    assert checks.is_same_process(77, name, str(tmp_path)) is same


@pytest.mark.parametrize("error, severity", [(None, None), ("EPERM", "error"), ("EACCES", "error"), ("ENOENT", None)])
def test_a_uvm_node_the_container_may_not_open_is_named(error, severity):
    node = {"exists": True, "char": True, "major": 508, "minor": 0}
    found = checks.uvm_open_findings(node, "/dev/nvidia-uvm", opener=lambda path: error)
    assert [(f.check, f.severity) for f in found] == ([("uvm_node", severity)] if severity else [])
    if error == "EPERM":
        assert "devices cgroup denies major 508" in found[0].what and "deploy.yml" in found[0].fix


def test_opening_a_real_node_without_a_driver_counts_as_allowed(tmp_path):
    # /dev/null is a character device anyone may open: nothing to name. A FIFO or a missing path is not a device here.
    assert checks.open_error("/dev/null") is None
    assert checks.uvm_open_findings({"exists": False, "char": False, "major": None, "minor": None}, str(tmp_path / "x")) == []
