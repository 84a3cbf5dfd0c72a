# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a Proxmox VE storage holds: is a container's template there before the container is created from it.

Proxmox accepts a create whose template is not on the storage: pve-container's create only parses the volid
(PVE::Storage::check_volume_access), starts the vzcreate task, allocates the root filesystem, and only then fails
the task in restore_archive (abs_filesystem_path -> activate_volume): ``unable to create CT 120 - volume
'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst' does not exist``. Listing the storage's templates first
(GET /nodes/{node}/storage/{storage}/content?content=vztmpl, the privileges a create needs for the template too)
refuses it before anything is sent, with the command that fixes it. No I/O of its own: the caller passes the listing.
"""

from __future__ import annotations

import re

# pve-storage PVE::Storage::Plugin::parse_volume_id.
VOLUME_ID_RE = re.compile(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", re.IGNORECASE)
DOCS = "docs/proxmox-host.md#the-container-template (llmops.serving)"


def template_volume(ostemplate):
    """(storage, file name) of a template volid such as ``local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst``.

    None for anything else: an absolute path (root@pam's; Proxmox looks for the file itself) or a volid that is not a
    template's, which Proxmox refuses with its own message when the create is sent."""
    match = VOLUME_ID_RE.match(ostemplate or "")
    if not match or not match.group(2).startswith("vztmpl/"):
        return None
    name = match.group(2)[len("vztmpl/"):]
    if not name or "/" in name:
        return None
    return match.group(1), name


def missing_template(ostemplate, listing):
    """None when ``listing`` (the storage's vztmpl content, as the API returns it) holds ``ostemplate``, else the
    message that says so and how to get it; a volid template_volume() does not take is never reported missing."""
    volume = template_volume(ostemplate)
    if volume is None:
        return None
    storage, name = volume
    held = sorted(str(item.get("volid")) for item in listing or [] if isinstance(item, dict))
    if ostemplate in held:
        return None
    return (
        "the container template %s is not on storage '%s' (it holds %s); Proxmox would accept the create and fail "
        "its task with \"volume '%s' does not exist\". Download it on the node: 'pveam update', then "
        "'pveam download %s %s' ('pveam available --section system' lists the templates Proxmox offers: take one it "
        "lists and set ostemplate to it), or copy a template of your own into the storage's template/cache directory. "
        "Nothing was created. See %s." % (ostemplate, storage, ", ".join(held) or "no templates", ostemplate, storage,
                                          name, DOCS)
    )
