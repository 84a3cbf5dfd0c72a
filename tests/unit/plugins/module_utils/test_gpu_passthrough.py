from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import (
    is_dynamic_char_major,
    normalize_devices,
    parse_allow,
    plan_passthrough,
)
from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import parse
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.test_pve_lxc_config import (
    JELLYFIN_DEV_FRAGMENT,
    QUICKPOD_6006_CONF,
    STACKEXCHANGE_102_CGROUP1_CONF,
    TELMATE_NVIDIA_FRAGMENT,
    TTECK_100_SNAPSHOTS_CONF,
    changed_lines,
)


def node(path, major, minor, node_type="c"):
    return {"path": path, "major": major, "minor": minor, "type": node_type}


# Host nodes as the pve_gpu_host role discovers them: two GPUs, uvm on dynamic major 508.
TWO_GPUS_UVM_508 = [
    node("/dev/nvidia0", 195, 0),
    node("/dev/nvidia1", 195, 1),
    node("/dev/nvidiactl", 195, 255),
    node("/dev/nvidia-uvm", 508, 0),
    node("/dev/nvidia-uvm-tools", 508, 1),
]


def mount(path, create="file"):
    return "lxc.mount.entry: %s %s none bind,optional,create=%s\n" % (path, path.lstrip("/"), create)


def assert_idempotent(plan, devices, **kwargs):
    again = plan_passthrough(plan.document, devices, **kwargs)
    assert again.changes == []
    assert again.document.render() == plan.document.render()


def test_raw_v2_adds_one_allow_per_major_and_one_mount_per_node_in_the_main_section():
    before = parse(TTECK_100_SNAPSHOTS_CONF)
    plan = plan_passthrough(before, TWO_GPUS_UVM_508, style="raw", cgroup_version="v2")
    removed, added = changed_lines(TTECK_100_SNAPSHOTS_CONF, plan.document.render())
    assert removed == []
    assert added == [
        "lxc.cgroup2.devices.allow: c 195:* rwm\n",
        "lxc.cgroup2.devices.allow: c 508:* rwm\n",
        mount("/dev/nvidia0"), mount("/dev/nvidia1"), mount("/dev/nvidiactl"), mount("/dev/nvidia-uvm"), mount("/dev/nvidia-uvm-tools"),
    ]
    # Before the first snapshot, snapshots byte-identical; the input document is not modified.
    after = plan.document.render()
    assert "unprivileged: 1\nlxc.cgroup2.devices.allow: c 195:* rwm\n" in after
    assert after.endswith(TTECK_100_SNAPSHOTS_CONF[TTECK_100_SNAPSHOTS_CONF.index("\n[fresh]"):])
    assert before.render() == TTECK_100_SNAPSHOTS_CONF
    assert [change["action"] for change in plan.changes] == ["add"] * 7
    assert_idempotent(plan, TWO_GPUS_UVM_508, style="raw", cgroup_version="v2")


def test_raw_v1_uses_the_cgroup_v1_key_and_keeps_unrelated_lines():
    plan = plan_passthrough(parse(STACKEXCHANGE_102_CGROUP1_CONF), TWO_GPUS_UVM_508, style="raw", cgroup_version="v1")
    removed, added = changed_lines(STACKEXCHANGE_102_CGROUP1_CONF, plan.document.render())
    assert removed == []
    assert added[:2] == ["lxc.cgroup.devices.allow: c 195:* rwm\n", "lxc.cgroup.devices.allow: c 508:* rwm\n"]
    assert "lxc.cgroup2" not in plan.document.render()
    assert_idempotent(plan, TWO_GPUS_UVM_508, style="raw", cgroup_version="v1")


def test_stale_uvm_major_is_corrected_in_place_and_nothing_else_moves():
    # The quickpod host ran uvm on 510 and caps on 235; after an update uvm is on 508. The module would stat the
    # caps nodes the config still mounts and protect 235.
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-modeset", 195, 254),
               node("/dev/nvidia-uvm", 508, 0), node("/dev/nvidia-uvm-tools", 508, 1)]
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), devices, style="raw", cgroup_version="v2", protected_majors=[235])
    removed, added = changed_lines(QUICKPOD_6006_CONF, plan.document.render())
    assert (removed, added) == (["lxc.cgroup2.devices.allow: c 510:* rwm\n"], ["lxc.cgroup2.devices.allow: c 508:* rwm\n"])
    assert plan.changes == [{
        "action": "update", "key": "lxc.cgroup2.devices.allow", "value": "c 508:* rwm", "old_value": "c 510:* rwm",
        "reason": "stale dynamic major c 510:* rwm replaced by the discovered major 508",
    }]
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=[235])


def test_unprotected_stale_caps_major_is_removed_too():
    # Without protection (caps nodes neither discovered nor passed otherwise), 235 is a stale NVIDIA line as well.
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), TWO_GPUS_UVM_508, style="raw", cgroup_version="v2")
    removed, added = changed_lines(QUICKPOD_6006_CONF, plan.document.render())
    assert removed == ["lxc.cgroup2.devices.allow: c 235:* rwm\n", "lxc.cgroup2.devices.allow: c 510:* rwm\n"]
    assert added == ["lxc.cgroup2.devices.allow: c 508:* rwm\n", mount("/dev/nvidia1")]
    # 235 became 508 in place; 510 had nothing left to become and went.
    allows = [entry.value for entry in plan.document.lxc_entries("lxc.cgroup2.devices.allow")]
    assert allows == ["c 195:* rwm", "c 508:* rwm", "a", "b 7:* rwm", "c 10:237 rwm"]
    assert_idempotent(plan, TWO_GPUS_UVM_508, style="raw", cgroup_version="v2")


def test_discovered_caps_major_keeps_its_line_and_the_other_stale_one_moves():
    # Telmate's user ran with 506 and 509; the host now has caps on 509 and uvm on 511.
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 511, 0),
               node("/dev/nvidia-uvm-tools", 511, 1), node("/dev/nvidia-caps", None, None, "d"),
               node("/dev/nvidia-caps/nvidia-cap1", 509, 1), node("/dev/nvidia-caps/nvidia-cap2", 509, 2)]
    plan = plan_passthrough(parse(TELMATE_NVIDIA_FRAGMENT), devices, style="raw", cgroup_version="v2")
    removed, added = changed_lines(TELMATE_NVIDIA_FRAGMENT, plan.document.render())
    assert removed == ["lxc.cgroup2.devices.allow: c 506:* rwm\n"]
    assert added == ["lxc.cgroup2.devices.allow: c 511:* rwm\n", mount("/dev/nvidia-caps/nvidia-cap1"), mount("/dev/nvidia-caps/nvidia-cap2")]
    # The directory mount already there counts; /dev/dri and apex lines are not ours.
    assert mount("/dev/nvidia-caps", "dir") in plan.document.render()
    assert "lxc.mount.entry: /dev/apex_0 dev/apex_0 none bind,optional,create=file\n" in plan.document.render()
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2")


def test_stale_line_of_the_other_cgroup_key_is_removed():
    # Synthetic edit of the Telmate fragment: the 506 line written with the cgroup v1 key.
    text = TELMATE_NVIDIA_FRAGMENT.replace("lxc.cgroup2.devices.allow: c 506:* rwm", "lxc.cgroup.devices.allow: c 506:* rwm")
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidia-uvm", 511, 0)]
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=[509])
    removed, added = changed_lines(text, plan.document.render())
    assert removed == ["lxc.cgroup.devices.allow: c 506:* rwm\n"]
    assert added == ["lxc.cgroup2.devices.allow: c 511:* rwm\n"]


def test_dynamic_major_without_nvidia_dynamic_mounts_is_not_ours():
    # Synthetic edit: a dynamic-major allow line in a container that mounts no nvidia-uvm/caps node stays.
    text = STACKEXCHANGE_102_CGROUP1_CONF + "lxc.cgroup.devices.allow: c 240:* rwm\n"
    devices = [node("/dev/nvidia0", 195, 0)]
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v1")
    removed, _added = changed_lines(text, plan.document.render())
    assert removed == []


def test_fixed_majors_and_other_shapes_are_never_stale():
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), TWO_GPUS_UVM_508, style="raw", cgroup_version="v2", protected_majors=[235])
    rendered = plan.document.render()
    for line in ("lxc.cgroup2.devices.allow: a\n", "lxc.cgroup2.devices.allow: b 7:* rwm\n", "lxc.cgroup2.devices.allow: c 10:237 rwm\n",
                 "lxc.cap.drop: \n", "lxc.mount.entry: /dev/loop0 dev/loop0 none bind,optional,create=file\n"):
        assert line in rendered
    assert is_dynamic_char_major(508) and is_dynamic_char_major(234) and not is_dynamic_char_major(195)
    assert not is_dynamic_char_major(226) and not is_dynamic_char_major(300)
    assert parse_allow("c  510:*   rwm") == ("c", 510) and parse_allow("c 510:0 rwm") is None and parse_allow("a") is None


def test_dev_style_uses_free_indexes_and_reuses_entries_for_the_same_path():
    text = JELLYFIN_DEV_FRAGMENT + "dev3: /dev/nvidia0\n"  # synthetic edit: nvidia0 already passed as dev3 without gid
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 508, 0), node("/dev/nvidia-uvm-tools", 508, 1)]
    plan = plan_passthrough(parse(text), devices, style="dev", dev_defaults={"gid": 44})
    assert [(change["action"], change["key"], change.get("value")) for change in plan.changes] == [
        ("update", "dev3", "/dev/nvidia0,gid=44"),
        ("add", "dev2", "/dev/nvidiactl,gid=44"),
        ("add", "dev4", "/dev/nvidia-uvm,gid=44"),
        ("add", "dev5", "/dev/nvidia-uvm-tools,gid=44"),
    ]
    assert plan.document.render() == (
        "dev0: /dev/dri/card0,gid=44\ndev1: /dev/dri/renderD128,gid=104\ndev2: /dev/nvidiactl,gid=44\n"
        "dev3: /dev/nvidia0,gid=44\ndev4: /dev/nvidia-uvm,gid=44\ndev5: /dev/nvidia-uvm-tools,gid=44\n"
    )
    assert_idempotent(plan, devices, style="dev", dev_defaults={"gid": 44})


def test_dev_style_per_node_options_win_over_defaults():
    devices = [dict(node("/dev/nvidia0", 195, 0), mode="0666", uid=0), node("/dev/nvidiactl", 195, 255)]
    plan = plan_passthrough(parse(""), devices, style="dev", dev_defaults={"gid": 44, "mode": "0660"})
    assert plan.document.render() == "dev0: /dev/nvidia0,gid=44,mode=0666,uid=0\ndev1: /dev/nvidiactl,gid=44,mode=0660\n"


def test_dev_style_skips_indexes_used_by_pending_changes():
    # Synthetic: dev0 is pending (set while the CT ran).
    text = "arch: amd64\n\n[pve:pending]\ndev0: /dev/dri/card0\n"
    plan = plan_passthrough(parse(text), [node("/dev/nvidia0", 195, 0)], style="dev")
    assert plan.changes[0]["key"] == "dev1"
    assert plan.document.render() == "arch: amd64\ndev1: /dev/nvidia0\n\n[pve:pending]\ndev0: /dev/dri/card0\n"


def test_dev_style_replaces_raw_lines_of_the_discovered_nodes_but_keeps_protected_majors():
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 508, 0), node("/dev/nvidia-uvm-tools", 508, 1)]
    # nvidia-modeset (195) and the caps nodes (235) stay raw-mounted: the module stats them and protects their majors.
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), devices, style="dev", protected_majors=[195, 235])
    removed, added = changed_lines(QUICKPOD_6006_CONF, plan.document.render())
    assert added == ["dev0: /dev/nvidia0\n", "dev1: /dev/nvidiactl\n", "dev2: /dev/nvidia-uvm\n", "dev3: /dev/nvidia-uvm-tools\n"]
    assert removed == [
        "lxc.cgroup2.devices.allow: c 510:* rwm\n",
        mount("/dev/nvidia0"), mount("/dev/nvidiactl"), mount("/dev/nvidia-uvm"), mount("/dev/nvidia-uvm-tools"),
    ]
    assert "lxc.cgroup2.devices.allow: c 195:* rwm\n" in plan.document.render()
    assert_idempotent(plan, devices, style="dev", protected_majors=[195, 235])


def test_dev_style_without_other_style_removal_leaves_raw_lines():
    devices = [node("/dev/nvidia0", 195, 0)]
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), devices, style="dev", remove_other_style=False)
    removed, added = changed_lines(QUICKPOD_6006_CONF, plan.document.render())
    assert removed == [] and added == ["dev0: /dev/nvidia0\n"]


def test_raw_style_removes_dev_entries_of_the_discovered_nodes():
    text = JELLYFIN_DEV_FRAGMENT + "dev2: /dev/nvidia0,gid=44\n"  # synthetic edit: nvidia0 passed as dev2 before
    devices = [node("/dev/nvidia0", 195, 0)]
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2")
    assert plan.document.render() == JELLYFIN_DEV_FRAGMENT + "lxc.cgroup2.devices.allow: c 195:* rwm\n" + mount("/dev/nvidia0")
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2")


def test_directories_are_raw_only():
    devices = [node("/dev/nvidia-caps", None, None, "d")]
    plan = plan_passthrough(parse(""), devices, style="raw")
    assert plan.document.render() == mount("/dev/nvidia-caps", "dir")
    with pytest.raises(ValueError, match="directory"):
        plan_passthrough(parse(""), devices, style="dev")


@pytest.mark.parametrize(
    "devices, message",
    [
        ([], "no devices"),
        ([node("/dev/nvidia0", None, 0)], "major number is required"),
        ([node("nvidia0", 195, 0)], "under /dev/"),
        ([node("/dev/../etc/passwd", 195, 0)], "under /dev/"),
        ([node("/dev/nvidia0,gid=0", 195, 0)], "commas"),
        ([node("/dev/nvidia0", 195, 0, "x")], "type must be"),
        ([node("/dev/nvidia0", "abc", 0)], "must be an integer"),
        ([node("/dev/nvidia0", 195, 0), node("/dev/nvidia0", 195, 1)], "twice"),
        ([dict(node("/dev/nvidia0", 195, 0), mode="666")], "octal"),
    ],
)
def test_invalid_devices_are_refused(devices, message):
    with pytest.raises(ValueError, match=message):
        normalize_devices(devices)


def test_duplicate_identical_devices_collapse():
    assert len(normalize_devices([node("/dev/nvidia0", 195, 0), node("/dev/nvidia0", "195", "0")])) == 1


def test_bad_style_or_cgroup_version():
    with pytest.raises(ValueError):
        plan_passthrough(parse(""), TWO_GPUS_UVM_508, style="bind")
    with pytest.raises(ValueError):
        plan_passthrough(parse(""), TWO_GPUS_UVM_508, cgroup_version="v3")


def test_planning_nothing_is_refused():
    with pytest.raises(ValueError, match="no devices"):
        plan_passthrough(parse(""), [], style="raw")


def test_planning_accepts_normalized_nodes():
    nodes = normalize_devices(TWO_GPUS_UVM_508)
    assert plan_passthrough(parse(""), nodes).document.render() == plan_passthrough(parse(""), TWO_GPUS_UVM_508).document.render()


def test_dynamic_nvidia_nodes_are_recognised_by_name_below_dev():
    from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import is_nvidia_dynamic_source
    assert is_nvidia_dynamic_source("/dev/nvidia-uvm")
    assert is_nvidia_dynamic_source("/dev/gpu-kit/nvidia-uvm-tools")
    assert is_nvidia_dynamic_source("/dev/nvidia-caps/nvidia-cap1")
    assert not is_nvidia_dynamic_source("/dev/nvidia0")
    assert not is_nvidia_dynamic_source("/srv/dev/nvidia-uvm")
    assert not is_nvidia_dynamic_source("/dev/nvidia-uvmx")
