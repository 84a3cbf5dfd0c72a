"""kernel_gpu_log: Xid lines in every public form (dmesg, dmesg --ctime, journalctl, old drivers without pid/name, a
GPU that fell off the bus without an Xid; sources in data/gpu_preflight/README.md), the IOMMU mode from the H200 VM's
real kernel log, and the xid_event and iommu_translated findings."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import kernel_gpu_log
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.preflight_data import H200, public

NODE_GPUS = [{"index": 0, "bus_id": "0000:43:00.0"}, {"index": 1, "bus_id": "0000:9b:00.0"}, {"index": 2, "bus_id": "0000:cb:00.0"}]


def test_xid_13_with_unknown_pid_from_vllm_issue_5901_is_an_application_fault():
    events = kernel_gpu_log.parse_xid_events(public("xid-13-vllm-5901.txt"))
    assert [(event["xid"], event["pci"], event["pid"], event["name"]) for event in events] == [(13, "0000:43:00", None, None)] * 3
    [finding] = kernel_gpu_log.xid_findings(events, NODE_GPUS, None)
    assert (finding.check, finding.severity, finding.subject) == ("xid_event", "warning", "GPU0 0000:43:00.0")
    assert finding.what.startswith("Xid 13 3 times since boot: Graphics Engine Exception")
    assert len(finding.evidence) == 2 and finding.evidence[0].startswith("[93297.027938] NVRM: Xid (PCI:0000:43:00): 13")


def test_ctime_dmesg_with_xid_13_and_109_from_gpud_pull_46():
    events = kernel_gpu_log.parse_xid_events(public("xid-13-109-gpud-46.txt"))
    assert [event["xid"] for event in events] == [13, 13, 13, 109]
    assert (events[-1]["pid"], events[-1]["name"]) == ("1797828", "pt_main_thread")
    findings = kernel_gpu_log.xid_findings(events, NODE_GPUS, {2})
    assert sorted((finding.what.split(":")[0], finding.severity) for finding in findings) == [
        ("Xid 109 1 time since boot", "warning"), ("Xid 13 3 times since boot", "warning")]
    assert "pt_main_thread (pid 1797828)" in [f for f in findings if "109" in f.what][0].what


def test_journal_lines_with_xid_45_from_open_gpu_kernel_modules_issue_1150():
    events = kernel_gpu_log.parse_xid_events(public("xid-45-ogkm-1150.txt"))
    assert len(events) == 7 and {event["pci"] for event in events} == {"0000:dc:00", "0000:ed:00", "0000:ba:00", "0000:97:00"}
    assert events[0]["message"] == "Ch 00000001 caused by previous Xid 149"
    findings = kernel_gpu_log.xid_findings(events, [], None)
    # None of these GPUs is listed: the subject names the bus, the severity stays.
    assert {finding.subject for finding in findings} == {"GPU at PCI 0000:dc:00", "GPU at PCI 0000:ed:00", "GPU at PCI 0000:ba:00",
                                                         "GPU at PCI 0000:97:00"}


def test_xid_119_gsp_timeout_from_gpud_pull_500_is_an_error_on_a_deployment_gpu_and_info_elsewhere():
    events = kernel_gpu_log.parse_xid_events(public("xid-119-gpud-500.txt"))
    assert [(event["pid"], event["name"]) for event in events] == [("4071838", "python"), ("28232", "cache_mgr_main")]
    [ours] = kernel_gpu_log.xid_findings(events, NODE_GPUS, {1})
    [other] = kernel_gpu_log.xid_findings(events, NODE_GPUS, {0})
    assert ours.severity == "error" and "GSP RPC timeout" in ours.what and "nvidia-smi -r" in ours.fix
    assert other.severity == "info"


def test_the_old_form_without_pid_and_a_fall_off_the_bus_without_xid_from_nvsentinel_issue_155():
    [old] = kernel_gpu_log.parse_xid_events(public("xid-79-nvsentinel-155.txt"))
    assert (old["xid"], old["pci"], old["pid"], old["message"]) == (79, "0000:44:00", None, "GPU has fallen off the bus")
    [fallen] = kernel_gpu_log.parse_xid_events(public("fallen-off-bus-nvsentinel-155.txt"))
    assert (fallen["xid"], fallen["pci"]) == (79, "0000:b3:00")
    [finding] = kernel_gpu_log.xid_findings([fallen], NODE_GPUS, None)
    assert finding.severity == "error" and "fallen off the bus" in finding.what and "nvidia-smi does not list" in finding.consequence


def test_no_xid_in_the_h200_kernel_log():
    assert kernel_gpu_log.parse_xid_events((H200 / "dmesg-nvidia-iommu.txt").read_text()) == []


def test_synthetic_unknown_xid_and_hostile_lines():
    text = ("NVRM: Xid (PCI:0000:43:00): 999, pid=1, name=x\x1b[31m, boom\n"
            "NVRM: Xid (PCI:0000:43:00): not-a-number\n"
            "NVRM: Xid (PCI:0000:43:00.0): 48, DBE (0x1)\n" + "noise\n" * 1000)
    events = kernel_gpu_log.parse_xid_events(text)
    assert [event["xid"] for event in events] == [999, 48]
    findings = {finding.what.split(" ")[1]: finding for finding in kernel_gpu_log.xid_findings(events, NODE_GPUS, None)}
    assert findings["999"].severity == "warning" and "does not know" in findings["999"].what
    assert "\x1b" not in findings["999"].what + "".join(findings["999"].evidence)
    assert findings["48"].severity == "error"


@pytest.mark.parametrize("xid, severity", [(13, "warning"), (31, "warning"), (43, "warning"), (45, "warning"), (48, "error"),
                                           (74, "error"), (79, "error"), (94, "warning"), (95, "error"), (154, "error")])
def test_the_catalogue_severities(xid, severity):
    assert kernel_gpu_log.XID_CATALOGUE[xid][0] == severity


def test_the_real_h200_log_says_translated():
    log = kernel_gpu_log.parse_iommu_log((H200 / "dmesg-nvidia-iommu.txt").read_text())
    assert log["default_domain"] == "Translated" and log["lines"] == ["[    0.137256] iommu: Default domain type: Translated"]
    assert kernel_gpu_log.iommu_mode(None, log, {}) == "translated"
    assert kernel_gpu_log.iommu_mode(None, log, {"iommu": "pt"}) == "passthrough"


@pytest.mark.parametrize("group_type, mode", [("DMA", "translated"), ("DMA-FQ", "translated"), ("identity", "passthrough"),
                                              ("unmanaged", None)])
def test_the_group_type_decides(group_type, mode):
    assert kernel_gpu_log.iommu_mode(group_type, {"default_domain": "Passthrough"}, {}) == mode


def test_synthetic_logs_and_command_lines():
    log = kernel_gpu_log.parse_iommu_log("[0.1] DMAR: IOMMU enabled\n[0.2] iommu: Default domain type: Passthrough (set via kernel command line)\n")
    assert (log["default_domain"], log["vendor"]) == ("Passthrough", "intel")
    assert kernel_gpu_log.parse_iommu_log("[0.3] AMD-Vi: Interrupt remapping enabled\n")["vendor"] == "amd"
    assert kernel_gpu_log.parse_cmdline("BOOT_IMAGE=/vmlinuz root=ZFS=rpool intel_iommu=on iommu=pt quiet\n") == {"intel_iommu": "on", "iommu": "pt"}
    assert kernel_gpu_log.iommu_mode(None, {"default_domain": None}, {"intel_iommu": "off"}) == "off"
    assert kernel_gpu_log.iommu_mode(None, {"default_domain": None}, {}) is None


def test_iommu_translated_is_an_error_only_with_acs_redirect():
    gpus = NODE_GPUS[:2]
    warning = kernel_gpu_log.iommu_finding("tp2", gpus, ["GPU0: IOMMU group 3, type DMA"], False, "intel")
    error = kernel_gpu_log.iommu_finding("tp2", gpus, [], True, "amd")
    assert (warning.check, warning.severity, error.severity) == ("iommu_translated", "warning", "error")
    assert "intel_iommu=on iommu=pt" in warning.fix and "'iommu=pt'" in error.fix and "ACS redirect" in error.consequence
