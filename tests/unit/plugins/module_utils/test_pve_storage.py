# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pve_storage: which templates a storage listing holds, and the message for one it does not. Against the simulator's
listing and create: tests/unit/plugins/modules/test_pve_lxc.py."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import pve_storage

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
# The shape of GET /nodes/{node}/storage/{storage}/content?content=vztmpl (pve-storage Plugin.pm get_subdir_files).
LISTING = [{"volid": "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz", "content": "vztmpl", "format": "txz",
            "size": 3264392, "ctime": 1750000000},
           {"volid": TEMPLATE, "content": "vztmpl", "format": "tzst", "size": 126322318, "ctime": 1730000000}]


@pytest.mark.parametrize("ostemplate,volume", [
    (TEMPLATE, ("local", "debian-12-standard_12.7-1_amd64.tar.zst")),
    ("cephfs-tmpl:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
     ("cephfs-tmpl", "ubuntu-24.04-standard_24.04-2_amd64.tar.zst")),
    # root@pam may give a path; Proxmox looks for that file itself.
    ("/var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst", None),
    # Not a template's volid: Proxmox refuses it with its own message when the create is sent.
    ("local:iso/debian-12.iso", None),
    ("local:vztmpl/", None),
    ("local:vztmpl/sub/dir.tar.zst", None),
    ("", None),
    (None, None),
])
def test_template_volume_takes_only_a_template_volid(ostemplate, volume):
    assert pve_storage.template_volume(ostemplate) == volume


def test_a_template_the_storage_holds_is_not_missing():
    assert pve_storage.missing_template(TEMPLATE, LISTING) is None
    assert pve_storage.missing_template("/srv/templates/debian.tar.zst", []) is None


def test_a_missing_template_names_the_storage_what_it_holds_and_the_pveam_commands():
    wanted = "local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"
    message = pve_storage.missing_template(wanted, LISTING)
    assert message.startswith("the container template %s is not on storage 'local' (it holds "
                              "local:vztmpl/alpine-3.22-default_20250617_amd64.tar.xz, %s); " % (wanted, TEMPLATE))
    assert "Proxmox would accept the create and fail its task with \"volume '%s' does not exist\"" % wanted in message
    assert "'pveam update', then 'pveam download local debian-13-standard_13.1-2_amd64.tar.zst'" in message
    assert "'pveam available --section system'" in message and "Nothing was created." in message
    assert message.endswith("See docs/proxmox-host.md#the-container-template (llmops.serving).")


def test_an_empty_storage_says_it_holds_no_templates():
    message = pve_storage.missing_template(TEMPLATE, [])
    assert "is not on storage 'local' (it holds no templates); " in message
