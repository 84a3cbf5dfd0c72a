# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render a role's templates and variables with ansible's own Templar, the collection's filters resolved by FQCN.

In a process of its own: ansible's collection loader must own the ansible_collections package, which the test process
has already imported from collections/ as a plain package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

def trusted(value):
    # Role files are trusted templates in a play; what load_from_file returns is not yet.
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value

job = json.load(sys.stdin)
_AnsibleCollectionFinder(paths=[job["collections"]])._install()
loader = DataLoader()
variables = {}
for path in job["var_files"]:
    variables.update(trusted(loader.load_from_file(path) or {}))
variables.update(job["variables"])
json.dump(Templar(loader=loader, variables=variables).template(trust_as_template(job["template"])), sys.stdout)
"""


def render(template, variables=None, var_files=()):
    """``template`` (text) rendered with ``variables`` over the variables of ``var_files`` (paths relative to the repo)."""
    job = {
        "collections": os.path.join(REPO, "collections"),
        "var_files": [os.path.join(REPO, path) for path in var_files],
        "variables": variables or {},
        "template": template,
    }
    run = subprocess.run([sys.executable, "-c", _RENDER], input=json.dumps(job), capture_output=True, text=True,
                         timeout=120, check=False)
    if run.returncode != 0:
        raise AssertionError("rendering failed: " + run.stderr[-3000:])
    return json.loads(run.stdout)


def render_file(relative_path, variables=None, var_files=()):
    """A template file of the repository, rendered as the template module does (over the variables of var_files)."""
    with open(os.path.join(REPO, relative_path), encoding="utf-8") as handle:
        return render(handle.read(), variables, var_files)
