# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve-sim's own reader and writer of PVE's container config format against the collection's parser.

Two independent implementations of pct.conf(5) read the same verbatim public samples (the ones the collection's
parser is tested with, each with its source named there) and must agree on what every sample says: options, raw lxc
lines, description, dev[n] entries, snapshots and pending changes. A bug in either shows as a disagreement.
"""
from __future__ import annotations

import hashlib
import os
import sys

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import pve_lxc_config as product
from ansible_collections.llmops.serving.tests.unit.plugins.module_utils.test_pve_lxc_config import VERBATIM_SAMPLES

SIM_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulators", "pve_sim"))
if SIM_SOURCE not in sys.path:
    sys.path.insert(0, SIM_SOURCE)

from pve_sim import configfile, pct_config  # noqa: E402  pylint: disable=wrong-import-position

# The samples whose lines are already in the order PVE's writer prints them (description, sorted options, raw lines,
# snapshots): the simulator writes them back byte for byte. The others are hand-edited (comments and blank lines
# between raw lines), which PVE rewrites into that order.
IN_PVE_ORDER = ("jellyfin_fragment", "quickpod_6006", "telmate_fragment", "tteck_100_snapshots")

# Synthetic (no public verbatim sample has them): a [pve:pending] section as PVE writes one, and a description with
# characters PVE's encode_text escapes (':' and non-ASCII) plus a literal '%' it leaves alone.
SYNTHETIC_PENDING = "arch: amd64\ncores: 2\ndev0: /dev/nvidia0\n\n[pve:pending]\ncores: 4\ndelete: swap\ndev1: /dev/nvidiactl,gid=44\n"
SYNTHETIC_DESCRIPTION = "#GPU host%3A 2x H200 %C3%A9t%C3%A9\n#100% busy\narch: amd64\n"


def product_view(text):
    """What the collection's parser says the text means (its public API only)."""
    document = product.parse(text)

    def raw_lines(section):
        return [(line.key, line.value) for line in section.lines if line.kind == product.LXC]

    def options(section):
        return dict((key, value) for key, value in section.options().items() if key != "description")

    pending = document.pending
    return {
        "options": dict((key, document.get(key)) for key in document.keys() if key != "description"),
        "lxc": [(entry.key, entry.value) for entry in document.lxc_entries()],
        "description": document.description,
        "devices": [(entry.key, entry.path, entry.gid, entry.uid, entry.mode, entry.deny_write) for entry in document.devices()],
        "snapshots": [(name, options(section), raw_lines(section)) for name, section in document.snapshots.items()],
        "pending": (options(pending), raw_lines(pending)) if pending is not None else ({}, []),
    }


def simulator_view(text):
    """What pve-sim's reader says the same text means."""
    config = pct_config.parse(text)
    return {
        "options": dict(config.options),
        "lxc": list(config.lxc),
        "description": config.description,
        "devices": [(entry.key, entry.path, entry.gid, entry.uid, entry.mode, entry.deny_write) for entry in config.devices()],
        "snapshots": [(name, dict(section.options), list(section.lxc)) for name, section in config.snapshots.items()],
        "pending": (dict(config.pending.options), list(config.pending.lxc)),
    }


SAMPLES = dict(VERBATIM_SAMPLES, synthetic_pending=SYNTHETIC_PENDING, synthetic_description=SYNTHETIC_DESCRIPTION)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_both_readers_agree_on_every_sample(name):
    text = SAMPLES[name]
    simulator = simulator_view(text)
    assert simulator == product_view(text)
    # Something was read: an empty reading on both sides would agree too.
    assert simulator["options"] or simulator["lxc"]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_what_the_simulator_writes_the_collections_parser_reads_back_unchanged(name):
    written = pct_config.parse(SAMPLES[name]).render()
    assert product_view(written) == product_view(SAMPLES[name])
    assert simulator_view(written) == simulator_view(SAMPLES[name])


@pytest.mark.parametrize("name", IN_PVE_ORDER)
def test_a_file_in_pves_order_is_written_back_byte_for_byte(name):
    assert pct_config.parse(VERBATIM_SAMPLES[name]).render() == VERBATIM_SAMPLES[name]


def test_a_hand_edited_file_is_rewritten_in_pves_order():
    text = VERBATIM_SAMPLES["stackexchange_102_cgroup1"]
    written = pct_config.parse(text).render()
    assert written != text
    lines = written.splitlines()
    # The comments between the raw lines become the description at the top; blank lines go.
    assert lines[:2] == ["# This line seems to pass through the host CPU's virtualization features",
                         "# These lines were needed for virtual machine networking to behave, I don't really understand them either"]
    assert "" not in lines
    assert lines[-3:] == ["lxc.cgroup.devices.allow: c 10:232 rwm", "lxc.cgroup.devices.allow: c 10:200 rwm",
                          "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"]


def test_pending_section_and_description_encoding():
    config = pct_config.parse(SYNTHETIC_PENDING)
    assert config.get("cores") == "2" and config.pending.get("cores") == "4" and config.pending.get("delete") == "swap"
    assert config.render() == SYNTHETIC_PENDING
    described = pct_config.parse(SYNTHETIC_DESCRIPTION)
    assert described.description == "GPU host: 2x H200 \u00e9t\u00e9\n100% busy\n"
    # encode_text escapes ':' and every non-ASCII byte and leaves '%' as it is.
    assert described.render() == SYNTHETIC_DESCRIPTION


def test_delete_outside_pending_and_unparsable_lines_are_dropped_as_pve_drops_them():
    config = pct_config.parse("arch: amd64\ndelete: swap\nthis is not a config line\nlxc.init.cmd = /sbin/init\n")
    assert config.options == {"arch": "amd64"}
    assert config.lxc == [("lxc.init.cmd", "/sbin/init")]
    assert config.render() == "arch: amd64\nlxc.init.cmd: /sbin/init\n"


@pytest.mark.parametrize("value, expected", [
    ("/dev/dri/card0,gid=44", {"path": "/dev/dri/card0", "gid": 44, "uid": None, "mode": None, "deny_write": False}),
    ("path=/dev/null,deny-write=1,mode=0660,uid=0", {"path": "/dev/null", "gid": None, "uid": 0, "mode": "0660", "deny_write": True}),
])
def test_device_values_agree_with_the_collections_parser(value, expected):
    assert pct_config.parse_device(value) == expected == product.parse_device(value)


@pytest.mark.parametrize("value", ["gid=44", "/dev/a,/dev/b", "/dev/a,color=red", "/dev/a,gid=-1", "/dev/a,mode=660", "/dev/a,deny-write=2"])
def test_device_values_pves_schema_refuses_are_refused_by_both(value):
    with pytest.raises(ValueError):
        pct_config.parse_device(value)
    with pytest.raises(ValueError):
        product.parse_device(value)


def test_the_digest_is_the_sha1_of_the_raw_file(tmp_path):
    text = VERBATIM_SAMPLES["tteck_100_snapshots"]
    (tmp_path / "100.conf").write_text(text, encoding="utf-8")
    config, raw, digest = configfile.load(str(tmp_path), 100)
    assert raw == text and digest == hashlib.sha1(text.encode("utf-8")).hexdigest()
    assert list(config.snapshots) == ["fresh", "tailscale"]
