from __future__ import annotations

from pathlib import Path

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


def mount_of(path, create="file"):
    """The value of the mount entry the planner writes for ``path``."""
    return "%s %s none bind,optional,create=%s" % (path, path.lstrip("/"), create)


def mount(path, create="file"):
    return "lxc.mount.entry: %s\n" % mount_of(path, create)


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
    # 510 can only have been uvm's: caps keeps its line (235), uvm is the one passed node left without one.
    assert plan.changes == [{
        "action": "update", "key": "lxc.cgroup2.devices.allow", "value": "c 508:* rwm", "old_value": "c 510:* rwm",
        "reason": "stale dynamic major 510 was nvidia-uvm's (nvidia-uvm is the only NVIDIA node the config passes that lacks its line); "
                  "nvidia-uvm is on 508 now",
    }]
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=[235])


def test_unprotected_stale_caps_major_is_removed_too():
    # Without protection (caps nodes neither discovered nor passed otherwise), 235 is a stale NVIDIA line as well.
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), TWO_GPUS_UVM_508, style="raw", cgroup_version="v2")
    removed, added = changed_lines(QUICKPOD_6006_CONF, plan.document.render())
    assert removed == ["lxc.cgroup2.devices.allow: c 235:* rwm\n", "lxc.cgroup2.devices.allow: c 510:* rwm\n"]
    assert added == ["lxc.cgroup2.devices.allow: c 508:* rwm\n", mount("/dev/nvidia1")]
    # Two stale majors, nothing in the config says which was uvm's: both go and 508 is added, rather than 235 (caps'
    # old major, by position) "becoming" uvm's 508.
    allows = [entry.value for entry in plan.document.lxc_entries("lxc.cgroup2.devices.allow")]
    assert allows == ["c 195:* rwm", "a", "b 7:* rwm", "c 10:237 rwm", "c 508:* rwm"]
    assert [change["action"] for change in plan.changes] == ["remove", "remove", "add", "add"]
    assert_idempotent(plan, TWO_GPUS_UVM_508, style="raw", cgroup_version="v2")


def test_discovered_caps_major_keeps_its_line_and_the_other_stale_one_moves():
    # Telmate's user ran with 506 and 509; the host now has caps on 509 and uvm on 511.
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 511, 0),
               node("/dev/nvidia-uvm-tools", 511, 1), node("/dev/nvidia-caps", None, None, "d"),
               node("/dev/nvidia-caps/nvidia-cap1", 509, 1), node("/dev/nvidia-caps/nvidia-cap2", 509, 2)]
    plan = plan_passthrough(parse(TELMATE_NVIDIA_FRAGMENT), devices, style="raw", cgroup_version="v2")
    removed, added = changed_lines(TELMATE_NVIDIA_FRAGMENT, plan.document.render())
    assert removed == ["lxc.cgroup2.devices.allow: c 506:* rwm\n"]
    assert added == ["lxc.cgroup2.devices.allow: c 511:* rwm\n"]
    assert plan.changes[0]["action"] == "update" and "506 was nvidia-uvm's" in plan.changes[0]["reason"]
    # The directory mount already there binds the cap nodes too (no second mount inside it); /dev/dri and apex lines
    # are not ours.
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
        # `$` also matches before a final newline: "0660\n" would end the dev line and start another.
        ([dict(node("/dev/nvidia0", 195, 0), mode="0660\n")], "octal"),
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


# =========================================================================== issue #13: real configs
#
# Verbatim public samples, one file each under data/ (gpu_passthrough_*), the source next to each name. The devices
# each test passes are what stat would show on that host: from the same source where it lists them (devboer's
# `ls -l`), otherwise stated as an assumption next to the test. On the planner before issue #13 every test below
# fails: it added a second mount onto a target already bound (a per-container copy, a node inside a bound directory),
# kept per-minor lines beside the wildcard that covers them, and rewrote stale majors by position.
DATA = Path(__file__).parent / "data"

SAMPLES = {
    # https://github.com/blakeblackshear/frigate/issues/8652 - `cat /etc/pve/lxc/2051.conf` in the issue, its first
    # 31 lines (a fragment: the post goes on): apex and nvidia nodes bound from per-container copies under
    # /lxc/102010/devices, per-minor allow lines c 195:0 and c 195:1.
    "frigate": "gpu_passthrough_frigate-8652-2051-fragment.conf",
    # https://github.com/baudneo/neo-mlapi_cudnn-base/blob/08b39343ef69b73f7dc245edf29204e99d7a68eb/README.md -
    # "Example Proxmox unprivileged LXC .conf": /dev/nvidia-caps bound as a directory (with a trailing "0,0"), GPU lines
    # 195/234/237, "USB (TPU)" lines 189/510, allow-all "a".
    "baudneo": "gpu_passthrough_baudneo-mlapi-readme.conf",
    # https://github.com/dev-project-us/Proxmox/blob/2cf5ecad37224e5b8049273dd4125243922f96d6/GPU-passthrough/readme.md
    # - one paragraph per node family, each allow line above its mounts: uvm on 504, caps (a directory mount) on 507.
    "dev_project_us": "gpu_passthrough_dev-project-us-readme.conf",
    # https://github.com/devboer/devboer-docs/blob/66184d43b4836a33a7f7937f768e525e3972edf6/content/docs/bind-gpu-to-unprivileged-lxc.md
    # - the MediaSrvUbuntu config: per-minor lines only (195:0, 195:255, 195:254, uvm 510:0 and 510:1, nvram 10:144),
    # nvram mounted onto "/dev/nvram". The same page lists the host's nodes as they were later: uvm 237:0/237:1,
    # caps 240:1/240:2 - the 510 lines had gone stale ("I have an error on 'nvidia-smi'").
    "devboer": "gpu_passthrough_devboer-mediasrvubuntu.conf",
    # https://github.com/andrewjlamarche/andrew.lamarche.me/blob/9a3542e5db173e3266e79573382784479d460b04/
    # _posts/2021-10-05-proxmox-7-lxc-multi-gpu-passthrough.md
    # - the lines for the Jellyfin container: 195:0, 195:254, 195:255 one by one, uvm 508 as a wildcard, DRI 226.
    "lamarche": "gpu_passthrough_lamarche-jellyfin-lines.conf",
    # https://github.com/gymnae/docker-steam-headless-wayland/blob/hyprland/README.md - "Setup for Proxmox", the example
    # config as the stored index holds that README (its commit is not recorded there): a comment above each allow line
    # names what it is for ("# nvidia-uvm, nvidia-uvm-tools" above 510, "# nvidia-caps" above 235), caps as dev[n].
    "gymnae": "gpu_passthrough_gymnae-steam-headless-readme.conf",
    # https://github.com/schmidt-silas/documentation/blob/0ed5f692126799c4ef68db97bd99bd52ec511949/Proxmox/gpu-passthrough-proxmox.md
    # - "## Change nubers": allow lines with an inline comment ("c 511:* rwm # Die 511 anpassen").
    "schmidt_silas": "gpu_passthrough_schmidt-silas-change-numbers.conf",
}

NVIDIA_195 = [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-modeset", 195, 254)]


def sample(name):
    return (DATA / SAMPLES[name]).read_text(encoding="utf-8")


def uvm(major):
    return [node("/dev/nvidia-uvm", major, 0), node("/dev/nvidia-uvm-tools", major, 1)]


def caps(major):
    return [node("/dev/nvidia-caps/nvidia-cap1", major, 1), node("/dev/nvidia-caps/nvidia-cap2", major, 2)]


def allow(value):
    return "lxc.cgroup2.devices.allow: %s\n" % value


def summary(plan):
    return [(change["action"], change.get("old_value"), change.get("value")) for change in plan.changes]


# -- class 1: a mount onto a target that is already bound -------------------------------------------


FRIGATE_NODES = [node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1), node("/dev/nvidiactl", 195, 255)]


def test_per_container_copies_that_are_the_same_devices_are_kept():
    # Frigate#8652: nvidia0/nvidia1 are bound from copies; stat shows them with the host nodes' numbers, and the apex
    # copies (major 120) are another device the module would protect.
    text = sample("frigate")
    copies = {"/lxc/102010/devices/nvidia0": ("c", 195, 0), "/lxc/102010/devices/nvidia1": ("c", 195, 1),
              "/lxc/102010/devices/apex_0": ("c", 120, 0), "/lxc/102010/devices/apex_1": ("c", 120, 1)}
    plan = plan_passthrough(parse(text), FRIGATE_NODES, style="raw", cgroup_version="v2", protected_majors=[120], source_nodes=copies)
    removed, added = changed_lines(text, plan.document.render())
    # No second mount onto dev/nvidia0 or dev/nvidia1; the per-minor lines go with the wildcard that covers them.
    assert removed == [allow("c 195:0 rwm"), allow("c 195:1 rwm")]
    assert added == [allow("c 195:* rwm"), mount("/dev/nvidiactl")]
    assert "lxc.mount.entry: /lxc/102010/devices/nvidia0 dev/nvidia0 none bind,optional,create=file\n" in plan.document.render()
    assert allow("c 120:0 rwm") in plan.document.render()
    assert_idempotent(plan, FRIGATE_NODES, style="raw", cgroup_version="v2", protected_majors=[120], source_nodes=copies)


def test_a_bound_copy_that_is_not_the_host_node_is_pointed_at_it_in_place():
    # Frigate#8652 without stat information: the entries onto dev/nvidia0 and dev/nvidia1 are rewritten, not doubled.
    text = sample("frigate")
    plan = plan_passthrough(parse(text), FRIGATE_NODES, style="raw", cgroup_version="v2", protected_majors=[120])
    assert summary(plan) == [
        ("remove", "c 195:0 rwm", None), ("remove", "c 195:1 rwm", None), ("add", None, "c 195:* rwm"),
        ("update", "/lxc/102010/devices/nvidia0 dev/nvidia0 none bind,optional,create=file", mount_of("/dev/nvidia0")),
        ("update", "/lxc/102010/devices/nvidia1 dev/nvidia1 none bind,optional,create=file", mount_of("/dev/nvidia1")),
        ("add", None, mount_of("/dev/nvidiactl")),
    ]
    targets = [entry.value.split()[1] for entry in plan.document.lxc_entries("lxc.mount.entry")]
    assert len(targets) == len(set(targets))
    assert "apex_0" in plan.document.render() and "/lxc/102010/devices/apex_1" in plan.document.render()
    assert_idempotent(plan, FRIGATE_NODES, style="raw", cgroup_version="v2", protected_majors=[120])


def test_dev_style_removes_the_mounts_onto_the_nodes_places_whatever_their_source():
    text = sample("frigate")
    devices = FRIGATE_NODES[:2]
    plan = plan_passthrough(parse(text), devices, style="dev", protected_majors=[120])
    removed, added = changed_lines(text, plan.document.render())
    assert added == ["dev0: /dev/nvidia0\n", "dev1: /dev/nvidia1\n"]
    assert removed == ["lxc.mount.entry: /lxc/102010/devices/nvidia0 dev/nvidia0 none bind,optional,create=file\n",
                       "lxc.mount.entry: /lxc/102010/devices/nvidia1 dev/nvidia1 none bind,optional,create=file\n"]


@pytest.mark.parametrize("name, devices, protected", [
    # Assumption: the 1660ti host as the README's comment groups it - uvm on 234, caps on 237 (which is which is not
    # said; the result is the same either way). /dev/dri (226) is bound too, so its major is protected.
    ("baudneo", NVIDIA_195 + uvm(234) + caps(237), [226]),
    # Assumption: after an update uvm is on 509 and caps on 508.
    ("dev_project_us", NVIDIA_195 + uvm(509) + caps(508), []),
])
def test_nodes_inside_a_bound_nvidia_caps_directory_get_no_mount_of_their_own(name, devices, protected):
    text = sample(name)
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=protected)
    _removed, added = changed_lines(text, plan.document.render())
    assert [line for line in added if "mount.entry" in line] == []
    assert [change for change in plan.changes if change["key"] == "lxc.mount.entry"] == []
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=protected)


def test_baudneo_keeps_everything_but_the_one_stale_dynamic_line():
    # The README's "USB (TPU)" 510 line is a dynamic major no discovered or passed node has: under the stale rule it
    # goes (its allow-all "a" line keeps every device allowed anyway). Everything else stays byte for byte.
    text = sample("baudneo")
    devices = NVIDIA_195 + uvm(234) + caps(237)
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=[226])
    assert changed_lines(text, plan.document.render()) == ([allow("c 510:* rwm")], [])


def test_a_directory_bound_from_elsewhere_onto_the_nodes_parent_is_pointed_at_the_host_directory():
    # Constructed (not a public sample): the caps directory bound from a per-container copy.
    text = "lxc.mount.entry: /var/lib/lxc/120/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n"
    plan = plan_passthrough(parse(text), caps(511), style="raw", cgroup_version="v2")
    assert plan.document.render() == (
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n" + allow("c 511:* rwm"))
    assert summary(plan) == [("add", None, "c 511:* rwm"),
                             ("update", text.split(": ", 1)[1].rstrip("\n"), "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir")]
    assert_idempotent(plan, caps(511), style="raw", cgroup_version="v2")


def test_a_node_inside_a_foreign_bind_of_dev_itself_is_refused():
    # Constructed: /dev of the container bound from elsewhere; taking that over would change every node in it.
    from ansible_collections.llmops.serving.plugins.module_utils.gpu_passthrough import PassthroughConflict
    with pytest.raises(PassthroughConflict, match="inside the bind mount"):
        plan_passthrough(parse("lxc.mount.entry: /srv/ct-dev dev none bind,create=dir\n"), [node("/dev/nvidia0", 195, 0)])


def test_duplicate_mounts_onto_one_target_are_reduced_to_the_one_of_the_host_node():
    # Constructed: what the old planner left on a config with a copy - the copy and a second mount of /dev/nvidia0.
    text = ("lxc.mount.entry: /lxc/102010/devices/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
            "lxc.cgroup2.devices.allow: c 195:* rwm\n" + mount("/dev/nvidia0"))
    plan = plan_passthrough(parse(text), [node("/dev/nvidia0", 195, 0)], style="raw", cgroup_version="v2")
    assert plan.document.render() == "lxc.cgroup2.devices.allow: c 195:* rwm\n" + mount("/dev/nvidia0")
    assert plan.changes[0]["reason"].startswith("a second mount onto dev/nvidia0")


# -- class 2: per-minor lines beside the wildcard --------------------------------------------------


def test_per_minor_lines_of_a_discovered_major_go_when_the_wildcard_is_written():
    # laMarche's Jellyfin lines; the host's numbers as the post gives them (195 and uvm on 508).
    text = sample("lamarche")
    devices = NVIDIA_195 + uvm(508)
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=[226])
    removed, added = changed_lines(text, plan.document.render())
    assert removed == [allow("c 195:0 rwm"), allow("c 195:254 rwm"), allow("c 195:255 rwm")]
    assert added == [allow("c 195:* rwm")]
    # DRI's own per-minor lines (226 is not a discovered major) stay.
    assert allow("c 226:0 rwm") in plan.document.render() and allow("c 226:128 rwm") in plan.document.render()
    assert all(change["reason"] == "covered by c 195:* rwm" for change in plan.changes if change["action"] == "remove")
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=[226])
    # A per-minor line under the other cgroup version's key is not covered by this key's wildcard: it stays.
    text = text.replace("lxc.cgroup2.devices.allow: c 195:0 rwm", "lxc.cgroup.devices.allow: c 195:0 rwm")  # synthetic edit
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=[226])
    assert "lxc.cgroup.devices.allow: c 195:0 rwm\n" in plan.document.render()


# -- class 3: a stale major is paired with the node it belonged to ---------------------------------


def test_stale_per_minor_uvm_lines_become_the_current_uvm_major_and_the_fixed_ones_are_covered():
    # devboer: the config's uvm lines say 510; the same page's listing shows uvm on 237 and caps on 240. nvram (10)
    # is bound too, so the module protects 10.
    text = sample("devboer")
    devices = [node("/dev/nvidia-modeset", 195, 254)] + uvm(237) + [node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255)] + caps(240)
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=[10])
    assert summary(plan) == [
        ("remove", "c 195:0 rwm", None), ("remove", "c 195:255 rwm", None),
        ("update", "c 510:0 rwm", "c 237:* rwm"),
        ("remove", "c 195:254 rwm", None), ("remove", "c 510:1 rwm", None),
        ("add", None, "c 195:* rwm"), ("add", None, "c 240:* rwm"),
        ("add", None, mount_of("/dev/nvidia-caps/nvidia-cap1")), ("add", None, mount_of("/dev/nvidia-caps/nvidia-cap2")),
    ]
    assert "510 was nvidia-uvm's" in plan.changes[2]["reason"]
    # nvram, bound as "/dev/nvram /dev/nvram", and its line are not ours.
    assert allow("c 10:144 rwm") in plan.document.render()
    assert "lxc.mount.entry: /dev/nvram /dev/nvram none bind,optional,create=file\n" in plan.document.render()
    assert "# rw gives reading and writing and m, I don't know\nlxc.cgroup2.devices.allow: c 237:* rwm\n" in plan.document.render()
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=[10])


def test_two_stale_majors_nothing_ties_are_removed_and_the_new_ones_added():
    # quickpod 6006: caps' 235 stands before uvm's 510 and nothing in the config says which is which. Assumption: after
    # an update uvm is on 508 and caps on 236. A positional pairing would show caps' 235 "becoming" uvm's 508.
    devices = NVIDIA_195 + uvm(508) + caps(236)
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), devices, style="raw", cgroup_version="v2", protected_majors=[7, 10])
    assert summary(plan) == [("remove", "c 235:* rwm", None), ("remove", "c 510:* rwm", None),
                             ("add", None, "c 508:* rwm"), ("add", None, "c 236:* rwm")]
    assert "update" not in [change["action"] for change in plan.changes]
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=[7, 10])


def test_stale_majors_are_paired_by_the_paragraph_they_stand_in():
    # dev-project-us: 504 stands with the uvm mounts, 507 with the caps directory. Assumption: uvm is on 509 and caps
    # on 508 now - each line becomes its own node's new major.
    text = sample("dev_project_us")
    devices = NVIDIA_195 + uvm(509) + caps(508)
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2")
    assert summary(plan) == [("update", "c 504:* rwm", "c 509:* rwm"), ("update", "c 507:* rwm", "c 508:* rwm")]
    assert "nvidia-uvm entries" in plan.changes[0]["reason"] and "nvidia-caps entries" in plan.changes[1]["reason"]


def test_a_stale_major_is_paired_by_the_comment_that_names_its_node():
    # gymnae: "# nvidia-caps" stands above 235 and "# nvidia-uvm, nvidia-uvm-tools" above 510. Assumption: after a driver
    # update the kernel gave 510 to nvidia-caps and 511 to nvidia-uvm. 235 was caps', whose major 510 already has its
    # line: 235 goes and 511 is added, rather than caps' old line turning into uvm's new major.
    text = sample("gymnae")
    devices = NVIDIA_195 + uvm(511) + caps(510)
    protected = [4, 10, 13, 226]  # input, tty, uhid/uinput/nvram, DRI: what the module's stat would find
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", protected_majors=protected)
    removed, added = changed_lines(text, plan.document.render())
    assert removed == ["dev2: /dev/nvidia-caps/nvidia-cap1\n", "dev3: /dev/nvidia-caps/nvidia-cap2\n", allow("c 235:* rwm")]
    assert added == [allow("c 511:* rwm"), mount("/dev/nvidia-caps/nvidia-cap1"), mount("/dev/nvidia-caps/nvidia-cap2")]
    reason = next(change["reason"] for change in plan.changes if change.get("old_value") == "c 235:* rwm")
    assert reason == "stale dynamic major 235 was nvidia-caps's (its comment names nvidia-caps); its line for 510 is there"
    # The comments themselves are never touched.
    assert "# nvidia-caps\n# dev/dri\n" in plan.document.render()
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", protected_majors=protected)


def test_an_allow_line_with_an_inline_comment_is_read_and_rewritten_with_its_comment():
    # schmidt-silas: "c 511:* rwm # Die 511 anpassen". Assumption: uvm moved to 509. LXC reads the three access
    # letters and ignores the rest, so the line is a rule like any other: 195 is there already, 511 becomes 509.
    text = sample("schmidt_silas")
    devices = NVIDIA_195 + uvm(509)
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2")
    assert changed_lines(text, plan.document.render()) == (
        [allow("c 511:* rwm # Die 511 anpassen")], [allow("c 509:* rwm # Die 511 anpassen")])
    assert parse_allow("c 195:* rwm # Die 195 anpassen") == ("c", 195)
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2")


def test_per_container_copies_tell_which_stale_major_was_whose():
    # Constructed (not a public sample): uvm moved 508 -> 510 and caps 509 -> 511, the nodes bound from mknod'ed copies
    # that still carry the old numbers. caps' 509 stands first; by position it would become uvm's 510.
    text = ("lxc.cgroup2.devices.allow: c 195:* rwm\n"
            "lxc.cgroup2.devices.allow: c 509:* rwm\n"
            "lxc.cgroup2.devices.allow: c 508:* rwm\n"
            "lxc.mount.entry: /var/lib/lxc/120/devices/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
            "lxc.mount.entry: /var/lib/lxc/120/devices/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
            "lxc.mount.entry: /var/lib/lxc/120/devices/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,optional,create=file\n")
    stat = {"/var/lib/lxc/120/devices/nvidia0": ("c", 195, 0), "/var/lib/lxc/120/devices/nvidia-uvm": ("c", 508, 0),
            "/var/lib/lxc/120/devices/nvidia-cap1": ("c", 509, 1)}
    devices = [node("/dev/nvidia0", 195, 0), node("/dev/nvidia-uvm", 510, 0), node("/dev/nvidia-caps/nvidia-cap1", 511, 1)]
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2", source_nodes=stat)
    assert summary(plan)[:2] == [("update", "c 509:* rwm", "c 511:* rwm"), ("update", "c 508:* rwm", "c 510:* rwm")]
    assert [change["value"] for change in plan.changes[2:]] == [mount_of("/dev/nvidia-uvm"), mount_of("/dev/nvidia-caps/nvidia-cap1")]
    # The copy of nvidia0 is the same device: kept.
    assert "/var/lib/lxc/120/devices/nvidia0 dev/nvidia0" in plan.document.render()
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2", source_nodes=stat)


def test_contradicting_evidence_pairs_nothing():
    # Synthetic edit of dev-project-us: a comment naming caps above the line that stands with the uvm mounts.
    text = sample("dev_project_us").replace("\nlxc.cgroup2.devices.allow: c 504:* rwm", "\n# nvidia-caps\nlxc.cgroup2.devices.allow: c 504:* rwm")
    plan = plan_passthrough(parse(text), NVIDIA_195 + uvm(509) + caps(508), style="raw", cgroup_version="v2")
    assert ("remove", "c 504:* rwm", None) in summary(plan) and ("add", None, "c 509:* rwm") in summary(plan)


def test_known_absent_unpassed_family_blocks_elimination():
    # quickpod with caps neither discovered nor on the host any more (the module's stat finds the cap paths missing):
    # 510 could have been caps' as well as uvm's, so it is removed rather than paired.
    stat = {"/dev/nvidia-caps/nvidia-cap1": None, "/dev/nvidia-caps/nvidia-cap2": None}
    plan = plan_passthrough(parse(QUICKPOD_6006_CONF), NVIDIA_195 + uvm(508), style="raw", cgroup_version="v2", protected_majors=[235],
                            source_nodes=stat)
    assert summary(plan) == [("remove", "c 510:* rwm", None), ("add", None, "c 508:* rwm")]


def test_something_else_mounted_onto_a_nodes_place_becomes_the_nodes_bind():
    # Constructed: a tmpfs where the caps directory belongs; rewriting only its source would leave a tmpfs.
    text = "lxc.mount.entry: tmpfs dev/nvidia-caps tmpfs rw,create=dir\n"
    devices = [node("/dev/nvidia-caps", None, None, "d")]
    plan = plan_passthrough(parse(text), devices, style="raw", cgroup_version="v2")
    assert plan.document.render() == mount("/dev/nvidia-caps", "dir")
    assert_idempotent(plan, devices, style="raw", cgroup_version="v2")
