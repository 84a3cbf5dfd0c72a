# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sphinx configuration of the collection's docs site (scripts/docs.sh, `make docs`).

Based on what `antsibull-docs sphinx-init` writes, with one difference: the build is offline. Instead of intersphinx
inventories fetched from docs.ansible.com, references to Ansible's own documentation (the labels antsibull-docs
emits, and plugins of other collections) resolve to their URLs on docs.ansible.com.
"""

from docutils import nodes

project = "llmops.serving"
copyright = "llmops.serving contributors"
title = "llmops.serving collection documentation"
html_short_title = "llmops.serving"

extensions = ["sphinx_antsibull_ext"]

pygments_style = "ansible"
highlight_language = "YAML+Jinja"

html_theme = "sphinx_ansible_theme"
html_show_sphinx = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False
html_theme_options = {"collapse_navigation": False}

default_role = "any"
nitpicky = True

ANSIBLE_DOCS = "https://docs.ansible.com/ansible/latest/"
# Labels of the Ansible documentation that antsibull-docs' pages refer to, and where they are.
ANSIBLE_LABELS = {
    "common_return_values": "reference_appendices/common_return_values.html#common-return-values",
    "ansible_configuration_settings": "reference_appendices/config.html#ansible-configuration-settings",
    # A module whose code is an action plugin (controller_report) notes "This module has a corresponding action plugin".
    "action_plugins": "plugins/action.html#action-plugins",
}


def _ansible_reference(app, env, node, contnode):
    """An unresolved :ref: to the Ansible documentation or another collection's plugin becomes an external link."""
    target = node.get("reftarget", "")
    url = None
    if target in ANSIBLE_LABELS:
        url = ANSIBLE_DOCS + ANSIBLE_LABELS[target]
    elif target.startswith("ansible_collections.") and not target.startswith("ansible_collections.llmops.serving."):
        # ansible_collections.<namespace>.<collection>.<plugin>_<type>[_requirements]
        parts = target.split(".")
        if len(parts) == 4:
            url = "%scollections/%s/%s/%s.html" % (ANSIBLE_DOCS, parts[1], parts[2], parts[3])
    if url is None:
        return None
    reference = nodes.reference("", "", internal=False, refuri=url)
    reference += contnode
    return reference


def setup(app):
    app.connect("missing-reference", _ansible_reference)
