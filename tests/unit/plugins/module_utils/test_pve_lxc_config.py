from __future__ import annotations

import difflib

import pytest

from ansible_collections.llmops.serving.plugins.module_utils.pve_lxc_config import (
    decode_text,
    format_device,
    parse,
    parse_device,
)

# ---------------------------------------------------------------------------------------------------
# Verbatim public samples. Each is the exact text its source shows, with the source next to it.
# ---------------------------------------------------------------------------------------------------

# `cat /etc/pve/lxc/6006.conf` of a GPU host: description comments, NVIDIA cgroup2 allow lines with the
# dynamic majors 235 and 510, NVIDIA mount entries, unrelated raw lines, "lxc.cap.drop: " with a trailing space.
# Source: https://github.com/en4ble1337/GPUaaS-Marketplace/blob/c23297eda2938d5ddc74d0df782808e89d70189f/quickpod-lxc.md
QUICKPOD_6006_CONF = """\
#try running speedtest first then run the following
#/var/lib/quickpod/update_scripts.sh
arch: amd64
cores: 46
features: nesting=1,keyctl=1
hostname: gpuaas-6
memory: 249856
net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:A7:50:B3,ip=dhcp,tag=30,type=veth
ostype: ubuntu
rootfs: hdd1:vm-6006-disk-0,size=2T
swap: 0
tags: quickpod
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 235:* rwm
lxc.cgroup2.devices.allow: c 510:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-modeset dev/nvidia-modeset none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-caps/nvidia-cap1 dev/nvidia-caps/nvidia-cap1 none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-caps/nvidia-cap2 dev/nvidia-caps/nvidia-cap2 none bind,optional,create=file
lxc.apparmor.profile: unconfined
lxc.cgroup2.devices.allow: a
lxc.cap.drop: \n\
lxc.cgroup2.devices.allow: b 7:* rwm
lxc.cgroup2.devices.allow: c 10:237 rwm
lxc.mount.entry: /dev/loop-control dev/loop-control none bind,optional,create=file
lxc.mount.entry: /dev/loop0 dev/loop0 none bind,optional,create=file
lxc.mount.entry: /dev/loop1 dev/loop1 none bind,optional,create=file
lxc.mount.entry: /dev/loop2 dev/loop2 none bind,optional,create=file
lxc.mount.entry: /dev/loop3 dev/loop3 none bind,optional,create=file
lxc.mount.entry: /dev/loop4 dev/loop4 none bind,optional,create=file
lxc.mount.entry: /dev/loop5 dev/loop5 none bind,optional,create=file
lxc.mount.entry: /dev/loop6 dev/loop6 none bind,optional,create=file
lxc.mount.entry: /dev/loop7 dev/loop7 none bind,optional,create=file
lxc.init.cmd: /sbin/init systemd.unified_cgroup_hierarchy=0
"""

# `cat /etc/pve/lxc/100.conf` with two snapshot sections, raw lxc lines inside the [fresh] snapshot.
# Source: https://github.com/tteck/Proxmox/issues/2230 (comment by tteck, 2023-12-23)
TTECK_100_SNAPSHOTS_CONF = """\
arch: amd64
cores: 1
features: nesting=1
hostname: testing
memory: 512
net0: name=eth0,bridge=vmbr0,firewall=1,gw=192.168.86.1,hwaddr=BC:24:11:B8:7A:11,ip=192.168.86.253/24,type=veth
ostype: debian
parent: tailscale
rootfs: local-lvm:vm-100-disk-0,size=2G
swap: 512
unprivileged: 1

[fresh]
arch: amd64
cores: 1
features: nesting=1
hostname: testing
memory: 512
net0: name=eth0,bridge=vmbr0,firewall=1,gw=192.168.86.1,hwaddr=BC:24:11:B8:7A:11,ip=192.168.86.253/24,type=veth
ostype: debian
rootfs: local-lvm:vm-100-disk-0,size=2G
snaptime: 1703272733
swap: 512
unprivileged: 1
lxc.cgroup2.devices.allow: c 10:200 rwm
lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file

[tailscale]
arch: amd64
cores: 1
features: nesting=1
hostname: testing
memory: 512
net0: name=eth0,bridge=vmbr0,firewall=1,gw=192.168.86.1,hwaddr=BC:24:11:B8:7A:11,ip=192.168.86.253/24,type=veth
ostype: debian
parent: fresh
rootfs: local-lvm:vm-100-disk-0,size=2G
snaptime: 1703332070
swap: 512
unprivileged: 1
"""

# /etc/pve/lxc/102.conf, hand-edited: blank lines and comments between raw cgroup v1 lines.
# Source: https://unix.stackexchange.com/questions/539528/lxc-cgroups-hardware-passthrough-explain-in-english-please
STACKEXCHANGE_102_CGROUP1_CONF = """\
arch: amd64
cores: 2
hostname: ubuntu-gns3vm2-clone
memory: 4096
net0: name=eth0,bridge=vmbr0,hwaddr=86:4B:53:B7:66:0A,ip=dhcp,type=veth
ostype: ubuntu
rootfs: local-lvm:base-102-disk-0,size=16G
swap: 2048
template: 1

# This line seems to pass through the host CPU's virtualization features
lxc.cgroup.devices.allow: c 10:232 rwm

# These lines were needed for virtual machine networking to behave, I don't really understand them either
lxc.cgroup.devices.allow: c 10:200 rwm
lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file
"""

# A fragment (not a whole file): the NVIDIA raw lines a user runs with, uvm/caps majors 506 and 509.
# Source: https://github.com/Telmate/terraform-provider-proxmox/issues/1138
TELMATE_NVIDIA_FRAGMENT = """\
lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir
lxc.mount.entry: /dev/apex_0 dev/apex_0 none bind,optional,create=file
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 506:* rwm
lxc.cgroup2.devices.allow: c 509:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir
"""

# A fragment: the dev[n] style lines of a container.
# Source: https://github.com/jellyfin/jellyfin.org/issues/982
JELLYFIN_DEV_FRAGMENT = """\
dev0: /dev/dri/card0,gid=44
dev1: /dev/dri/renderD128,gid=104
"""

VERBATIM_SAMPLES = {
    "quickpod_6006": QUICKPOD_6006_CONF,
    "tteck_100_snapshots": TTECK_100_SNAPSHOTS_CONF,
    "stackexchange_102_cgroup1": STACKEXCHANGE_102_CGROUP1_CONF,
    "telmate_fragment": TELMATE_NVIDIA_FRAGMENT,
    "jellyfin_fragment": JELLYFIN_DEV_FRAGMENT,
}


def changed_lines(before, after):
    """(removed, added) lines between two texts, for asserting that an edit touched only what it should."""
    removed, added = [], []
    matcher = difflib.SequenceMatcher(a=before.splitlines(True), b=after.splitlines(True), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed.extend(before.splitlines(True)[i1:i2])
            added.extend(after.splitlines(True)[j1:j2])
    return removed, added


@pytest.mark.parametrize("name", sorted(VERBATIM_SAMPLES))
def test_verbatim_samples_round_trip_byte_for_byte(name):
    text = VERBATIM_SAMPLES[name]
    assert parse(text).render() == text
    # The same without the final newline, and with CRLF line ends: still exact.
    assert parse(text.rstrip("\n")).render() == text.rstrip("\n")
    crlf = text.replace("\n", "\r\n")
    assert parse(crlf).render() == crlf


def test_quickpod_sample_is_understood():
    document = parse(QUICKPOD_6006_CONF)
    assert document.description == "try running speedtest first then run the following\n/var/lib/quickpod/update_scripts.sh\n"
    assert document.get("hostname") == "gpuaas-6" and document.get("cores") == "46"
    assert document.snapshots == {} and document.pending is None
    allows = [entry.value for entry in document.lxc_entries("lxc.cgroup2.devices.allow")]
    assert allows == ["c 195:* rwm", "c 235:* rwm", "c 510:* rwm", "a", "b 7:* rwm", "c 10:237 rwm"]
    assert len(document.lxc_entries("lxc.mount.entry")) == 16
    assert [entry.value for entry in document.lxc_entries("lxc.cap.drop")] == [""]
    keys = [entry.key for entry in document.lxc_entries()]
    assert keys[0] == "lxc.cgroup2.devices.allow" and keys[-1] == "lxc.init.cmd" and len(keys) == 25


def test_snapshot_sections_are_separate_and_untouched_by_edits():
    document = parse(TTECK_100_SNAPSHOTS_CONF)
    assert list(document.snapshots) == ["fresh", "tailscale"]
    assert document.get("parent") == "tailscale"
    assert document.snapshots["fresh"].options()["snaptime"] == "1703272733"
    # The raw lines of the [fresh] snapshot are not the main section's.
    assert document.lxc_entries() == []
    document.set("dev0", "/dev/nvidia0,gid=44")
    document.add_lxc("lxc.cgroup2.devices.allow", "c 195:* rwm")
    after = document.render()
    removed, added = changed_lines(TTECK_100_SNAPSHOTS_CONF, after)
    assert removed == []
    assert added == ["dev0: /dev/nvidia0,gid=44\n", "lxc.cgroup2.devices.allow: c 195:* rwm\n"]
    # dev0 goes where PVE's sorted writer puts it; the raw line ends the main section, before the blank line.
    assert "cores: 1\ndev0: /dev/nvidia0,gid=44\nfeatures: nesting=1\n" in after
    assert "unprivileged: 1\nlxc.cgroup2.devices.allow: c 195:* rwm\n\n[fresh]\n" in after
    snapshot_text = TTECK_100_SNAPSHOTS_CONF[TTECK_100_SNAPSHOTS_CONF.index("[fresh]"):]
    assert after.endswith(snapshot_text)


def test_set_existing_key_rewrites_only_that_line():
    document = parse(QUICKPOD_6006_CONF)
    assert document.set("cores", "46") is False
    assert document.render() == QUICKPOD_6006_CONF
    assert document.set("cores", "32") is True
    removed, added = changed_lines(QUICKPOD_6006_CONF, document.render())
    assert (removed, added) == (["cores: 46\n"], ["cores: 32\n"])


def test_remove_key_and_raw_lines():
    document = parse(QUICKPOD_6006_CONF)
    assert document.remove("tags") == 1
    assert document.remove("tags") == 0
    stale = [entry for entry in document.lxc_entries("lxc.cgroup2.devices.allow") if entry.value == "c 510:* rwm"][0]
    document.replace_lxc(stale, "lxc.cgroup2.devices.allow", "c 508:* rwm")
    loop7 = [entry for entry in document.lxc_entries("lxc.mount.entry") if entry.value.startswith("/dev/loop7 ")][0]
    document.remove_lxc(loop7)
    removed, added = changed_lines(QUICKPOD_6006_CONF, document.render())
    assert removed == ["tags: quickpod\n", "lxc.cgroup2.devices.allow: c 510:* rwm\n",
                       "lxc.mount.entry: /dev/loop7 dev/loop7 none bind,optional,create=file\n"]
    assert added == ["lxc.cgroup2.devices.allow: c 508:* rwm\n"]
    # The in-place replacement kept the position of the old line.
    values = [entry.value for entry in document.lxc_entries("lxc.cgroup2.devices.allow")]
    assert values[:3] == ["c 195:* rwm", "c 235:* rwm", "c 508:* rwm"]
    with pytest.raises(ValueError):
        document.remove_lxc(loop7)


def test_hand_edited_comments_stay_where_they_are():
    document = parse(STACKEXCHANGE_102_CGROUP1_CONF)
    assert document.description.splitlines() == [
        " This line seems to pass through the host CPU's virtualization features",
        " These lines were needed for virtual machine networking to behave, I don't really understand them either",
    ]
    assert [entry.value for entry in document.lxc_entries("lxc.cgroup.devices.allow")] == ["c 10:232 rwm", "c 10:200 rwm"]
    document.add_lxc("lxc.cgroup.devices.allow", "c 195:* rwm")
    document.set("dev0", "/dev/nvidia0")
    after = document.render()
    assert after == STACKEXCHANGE_102_CGROUP1_CONF.replace("cores: 2\n", "cores: 2\ndev0: /dev/nvidia0\n") + "lxc.cgroup.devices.allow: c 195:* rwm\n"


def test_appending_to_a_file_without_final_newline_keeps_that_ending():
    text = JELLYFIN_DEV_FRAGMENT.rstrip("\n")
    document = parse(text)
    document.add_lxc("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file")
    assert document.render() == JELLYFIN_DEV_FRAGMENT + "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"


def test_devices_are_parsed_per_the_pve_schema():
    document = parse(JELLYFIN_DEV_FRAGMENT)
    devices = document.devices()
    assert [(device.key, device.path, device.gid) for device in devices] == [("dev0", "/dev/dri/card0", 44), ("dev1", "/dev/dri/renderD128", 104)]
    assert devices[0].options() == {"path": "/dev/dri/card0", "gid": 44, "uid": None, "mode": None, "deny_write": False}


def test_devices_are_ordered_by_numeric_index():
    # Synthetic: dev10 before dev2 in the file (PVE's writer sorts keys as strings).
    document = parse("dev1: /dev/nvidia1\ndev10: /dev/nvidia-uvm\ndev2: /dev/nvidiactl\n")
    assert [device.index for device in document.devices()] == [1, 2, 10]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("/dev/nvidia0", {"path": "/dev/nvidia0", "gid": None, "uid": None, "mode": None, "deny_write": False}),
        ("path=/dev/nvidia0,mode=0666,uid=0,gid=44,deny-write=1", {"path": "/dev/nvidia0", "gid": 44, "uid": 0, "mode": "0666", "deny_write": True}),
        ("/dev/dri/renderD128,gid=104", {"path": "/dev/dri/renderD128", "gid": 104, "uid": None, "mode": None, "deny_write": False}),
    ],
)
def test_parse_device(value, expected):
    assert parse_device(value) == expected


@pytest.mark.parametrize(
    "value", ["gid=44", "/dev/x,gid=-1", "/dev/x,mode=666", "/dev/x,mode=0666\n", "/dev/x,colour=red", "/dev/x,gid=1,gid=2",
              "/dev/x,/dev/y", "/dev/x,deny-write=2"]
)
def test_parse_device_rejects_what_pve_rejects(value):
    with pytest.raises(ValueError):
        parse_device(value)


def test_format_device_matches_pve_print_property_string_order():
    assert format_device("/dev/nvidia0") == "/dev/nvidia0"
    assert format_device("/dev/nvidia0", gid=44, uid=0, mode="0666", deny_write=True) == "/dev/nvidia0,deny-write=1,gid=44,mode=0666,uid=0"
    for value in ("/dev/nvidia0,gid=44", "/dev/nvidia0,deny-write=1,gid=44,mode=0666,uid=0"):
        parsed = parse_device(value)
        assert format_device(parsed["path"], parsed["gid"], parsed["uid"], parsed["mode"], parsed["deny_write"]) == value


def test_pending_section_and_unknown_lines_are_kept():
    # Synthetic: a [pve:pending] section as PVE writes it, and a line no grammar rule matches.
    text = "arch: amd64\ndev0: /dev/nvidia0\nthis is not a config line\n\n[pve:pending]\ndev1: /dev/nvidiactl\ndelete: swap\n"
    document = parse(text)
    assert document.render() == text
    assert document.pending is not None and document.snapshots == {}
    assert [device.key for device in document.devices(document.pending)] == ["dev1"]
    document.set("dev2", "/dev/nvidia-uvm")
    assert document.render() == text.replace("dev0: /dev/nvidia0\n", "dev0: /dev/nvidia0\ndev2: /dev/nvidia-uvm\n")
    assert document.pending.render() == "[pve:pending]\ndev1: /dev/nvidiactl\ndelete: swap\n"


def test_get_returns_the_last_value_like_pve():
    document = parse("cores: 1\ncores: 2\n")
    assert document.get("cores") == "2"
    document.set("cores", "4")
    assert document.render() == "cores: 1\ncores: 4\n"


def test_lxc_lines_written_with_equals_are_understood():
    # pct.conf(5) allows "lxc.init_cmd = /sbin/my_own_init".
    document = parse("lxc.init_cmd = /sbin/my_own_init\n")
    assert [(entry.key, entry.value) for entry in document.lxc_entries()] == [("lxc.init_cmd", "/sbin/my_own_init")]
    assert document.render() == "lxc.init_cmd = /sbin/my_own_init\n"


@pytest.mark.parametrize("key, value", [("cores", "1\nmemory: 1"), ("lxc.mount.entry", "x"), ("description", "x"), ("cores", " 1"),
                                        ("cores\n", "1"), ("dev0\n", "/dev/nvidia0")])
def test_set_refuses_what_would_corrupt_the_file(key, value):
    with pytest.raises(ValueError):
        parse("").set(key, value)


def test_add_lxc_refuses_newlines_and_non_lxc_keys():
    document = parse("")
    with pytest.raises(ValueError):
        document.add_lxc("lxc.mount.entry", "a\nb")
    with pytest.raises(ValueError):
        document.add_lxc("cores", "1")
    # A key that ends in a newline would put the value on a line of its own.
    with pytest.raises(ValueError):
        document.add_lxc("lxc.apparmor.profile\n", "unconfined")
    assert document.render() == ""


def test_edits_to_an_empty_file():
    document = parse("")
    document.add_lxc("lxc.cgroup2.devices.allow", "c 195:* rwm")
    document.set("dev0", "/dev/nvidia0")
    assert document.render() == "dev0: /dev/nvidia0\nlxc.cgroup2.devices.allow: c 195:* rwm\n"


def test_copy_is_independent():
    document = parse(QUICKPOD_6006_CONF)
    clone = document.copy()
    clone.set("cores", "1")
    assert document.render() == QUICKPOD_6006_CONF


def test_decode_text_undoes_pve_encode_text():
    # Synthetic: PVE's encode_text escapes ':' and non-ASCII bytes (no public verbatim encoded description was found).
    assert decode_text("https%3A//example.org caf%C3%A9") == "https://example.org café"
    assert parse("#GPU host%3A 2x H200\narch: amd64\n").description == "GPU host: 2x H200\n"
