# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: model_files
short_description: Check a model directory against a Hugging Face Hub revision, or its own weight index
description:
  - With O(repo), reads the revision's file list from the Hub (the commit a branch or tag resolves to, then the
    recursive tree at that commit with every file's size and hash, as C(hf download) of huggingface_hub 2.4.0 reads
    it) and compares O(path) with it - every file of the revision present, of its size and, with O(verify=hash), of
    its hash (sha256 for LFS files, git's blob sha1 for the others) - and every shard that
    C(model.safetensors.index.json) names is in the revision and present. RV(download_bytes) is what is still to
    download, RV(disk) whether the target filesystem has room for it (free space plus what RV(remove) would free,
    against the download plus O(reserve_bytes)), and RV(remove) the files in the way of a download (damaged, of
    another size, a FIFO or a symlink out of the directory in a file's place) with the C(.metadata) file
    C(hf download --local-dir) keeps for each, and the partial C(.incomplete) files a killed C(hf download) left (it
    never reuses them).
  - Without O(repo), the checks that need no Hub - C(config.json) present, every shard the index names present and a
    regular file, each shard's safetensors header whole (the file as long as its header says) and holding the
    tensors the index puts in it.
  - Hashing a large model on every run is too slow; verified hashes are kept in C(<path>/.cache/llmops/hashes.json)
    by each file's size, modification and change times, inode and device, so an unchanged file is not hashed again
    and a changed one is (O(hash_cache)).
  - Safe on hostile input - names from the Hub or the index with C(..), an absolute path or a control character are
    refused and never touched; symlinks are followed only inside O(path); a FIFO, socket or device is named, never
    opened; the index is read up to 64 MiB. The token goes only into the Authorization header of requests to the
    endpoint's origin and never into a result or a message.
  - Reads only; it never reports a change. It writes only its hash cache, and not in check mode. Fails when the Hub
    refuses (unknown repository or revision, gated without access, an invalid token) or cannot be reached, naming the
    reason; what the directory lacks is returned, not failed on.
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  path:
    description: The model directory (the C(--local-dir) of C(hf download)). It need not exist yet.
    type: path
    required: true
  repo:
    description:
      - Hugging Face repository ID (C(namespace/name)) whose revision the directory should hold. Omitted, only the
        checks that need no Hub run.
    type: str
  revision:
    description: Branch, tag or commit of O(repo). RV(commit) is the commit it resolves to.
    type: str
    default: main
  endpoint:
    description:
      - The Hub's URL. Omitted, C(HF_ENDPOINT) from the module's environment, else C(https://huggingface.co).
    type: str
  token:
    description:
      - "Hugging Face token for private and gated repositories, sent as C(Authorization: Bearer). Omitted,
        C(HF_TOKEN) from the module's environment; empty sends none."
    type: str
  verify:
    description: C(hash) compares every file's hash with the revision's, C(size) only its size.
    type: str
    choices: [hash, size]
    default: hash
  hash_cache:
    description: Reuse and keep verified hashes in C(<path>/.cache/llmops/hashes.json).
    type: bool
    default: true
  check_access:
    description:
      - Ask the Hub whether this token may download the revision's files (a C(HEAD) of one file), so that a gated
        repository without access fails here rather than in the download.
    type: bool
    default: true
  reserve_bytes:
    description: Free space to leave on the filesystem after the download, on top of RV(download_bytes).
    type: int
    default: 1073741824
  timeout:
    description: Seconds to wait for each Hub answer.
    type: int
    default: 30
  validate_certs:
    description: Verify the Hub's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A PEM file of CA certificates to verify the Hub's certificate with (a site mirror's own CA).
    type: path
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - The Hub's tree listing carries each file's size, its git blob id and, for LFS files, the sha256 of the content;
    these are what C(hf download) and C(hf cache verify) compare with too.
  - huggingface_hub 2.4.0 downloads each file into a process-unique C(.incomplete) file and removes it when the
    download fails; a killed download (the async timeout, an OOM kill) leaves it, and no later run reuses it. A rerun
    downloads again only the files whose recorded commit is not the revision's.
seealso:
  - name: huggingface_hub, download files to a local folder
    description: The layout C(hf download --local-dir) leaves, C(.cache/huggingface/download/<file>.metadata).
    link: https://huggingface.co/docs/huggingface_hub/guides/download#download-files-to-a-local-folder
  - name: safetensors format
    description: The 8-byte header length, the JSON header with C(data_offsets), then the data.
    link: https://github.com/huggingface/safetensors#format
"""

EXAMPLES = r"""
- name: Plan the download of a pinned revision
  llmops.serving.model_files:
    path: /models/Qwen3.6-27B
    repo: Qwen/Qwen3.6-27B
    revision: main
    token: "{{ hf_token | default(omit) }}"
  register: model_plan

- name: Refuse a download that does not fit
  ansible.builtin.assert:
    that: model_plan.disk.enough
    fail_msg: "{{ model_plan.message }}"

- name: Check a pre-staged model without the Hub
  llmops.serving.model_files:
    path: /models/Qwen3.6-27B
  register: staged
  failed_when: not staged.complete
"""

RETURN = r"""
complete:
  description: True when nothing is missing, of the wrong size, damaged, in the way or unsafe, and every shard the index
    names is present (and, with O(repo), in the revision).
  returned: always
  type: bool
  sample: false
message:
  description: One sentence - the revision and commit, what is to download and why, and the free space.
  returned: always
  type: str
  sample: >-
    Qwen/Qwen3.6-27B at 0123456789ab (main): 1 of 13 files to download, 578.7 KiB; missing:
    model-00003-of-00004.safetensors; 76.0 GiB free on /models/Qwen3.6-27B, 1.0 GiB needed (with 1.0 GiB reserve)
problems:
  description: One sentence per thing that keeps the directory from being the revision (or a whole model).
  returned: always
  type: list
  elements: str
commit:
  description: The commit O(revision) resolves to on the Hub; null without O(repo).
  returned: always
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
gated:
  description: Whether the repository is gated (C(auto) or C(manual)) or not (false); null without O(repo).
  returned: always
  type: raw
  sample: false
files:
  description: Number of files checked (the revision's, or C(config.json) and the shards without O(repo)).
  returned: always
  type: int
  sample: 13
expected_bytes:
  description: Total size of the revision's files; 0 without O(repo).
  returned: always
  type: int
present_bytes:
  description: Bytes of the files present and verified.
  returned: always
  type: int
download_bytes:
  description: Bytes still to download - missing files and those to replace.
  returned: always
  type: int
missing:
  description: Files that are not there.
  returned: always
  type: list
  elements: str
wrong_size:
  description: Files of another size than the revision's, with C(path), C(size) and C(expected_size).
  returned: always
  type: list
  elements: dict
damaged:
  description: Files whose hash is not the revision's, with C(path), C(algorithm) (C(sha256) or C(git-blob-sha1)),
    C(expected) and C(actual).
  returned: always
  type: list
  elements: dict
not_regular:
  description: Files in whose place there is something else, with C(path) and C(problem) (a FIFO, a directory, a
    symlink out of the directory).
  returned: always
  type: list
  elements: dict
unsafe_names:
  description: Names from the Hub's list or the index refused as paths (C(..), absolute, control characters), and
    malformed entries of the Hub's list.
  returned: always
  type: list
  elements: str
index:
  description: The weight index, C(present), C(shards) (how many it names) and C(error) (why it could not be read).
  returned: always
  type: dict
missing_shards:
  description: Shards the index names that are not present as regular files.
  returned: always
  type: list
  elements: str
shards_not_in_revision:
  description: Shards the index names that the revision does not have (with O(repo)).
  returned: always
  type: list
  elements: str
safetensors_problems:
  description: Shards whose safetensors header is not whole, with C(path) and C(problem) (checked when no hash is).
  returned: always
  type: list
  elements: dict
weights:
  description: C(sharded) (an index), C(single) (C(model.safetensors)) or C(none).
  returned: always
  type: str
incomplete:
  description: Partial files C(hf download) left under C(.cache/huggingface/download), C(files) (C(path), C(size))
    and C(bytes).
  returned: always
  type: dict
disk:
  description:
    - The target filesystem - C(path) (the directory measured), C(free_bytes), C(reclaimable_bytes) (what RV(remove)
      frees), C(needed_bytes) (RV(download_bytes) plus O(reserve_bytes), 0 when nothing is to download) and
      C(enough).
  returned: always
  type: dict
remove:
  description: Absolute paths to delete before downloading again - the files in the way, their C(.metadata) files,
    and the partial C(.incomplete) files.
  returned: always
  type: list
  elements: str
hashing:
  description: C(hashed_files), C(hashed_bytes) (hashed in this run) and C(cached_files) (taken from the hash cache).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.llmops.serving.plugins.module_utils import hf_hub
from ansible_collections.llmops.serving.plugins.module_utils import model_files

MIB = 1024.0 * 1024


def human(size):
    for unit, scale in (("GiB", MIB * 1024), ("MiB", MIB), ("KiB", 1024.0)):
        if size >= scale:
            return "%.1f %s" % (size / scale, unit)
    return "%d B" % size


def hub_listing(module, hub):
    """(revision info, {name: entry}, refused entries) from the Hub; fails the module with the Hub's reason."""
    params = module.params
    try:
        info = hub.revision(params["repo"], params["revision"])
        expected, refused = hf_hub.file_entries(hub.tree(params["repo"], info["commit"]), hub.token)
        if params["check_access"] and expected:
            probe = "config.json" if "config.json" in expected else sorted(expected)[0]
            if model_files.name_error(probe) is None:
                hub.check_download_access(params["repo"], info["commit"], probe)
    except hf_hub.HubError as exc:
        module.fail_json(msg=hf_hub.redact(exc.message, hub.token), hub_error=exc.kind, status=exc.status)
    return info, expected, refused


def summary(params, info, result):
    subject = "%s at %s (%s)" % (params["repo"], info["commit"][:12], params["revision"]) if info else params["path"]
    if result["complete"]:
        checked = "hashed" if params["verify"] == "hash" and info else "checked"
        return "%s: all %d files present and %s (%s; %d hashed now, %d from the hash cache)" % (
            subject, result["files"], checked, human(result["present_bytes"]), result["hashing"]["hashed_files"],
            result["hashing"]["cached_files"])
    disk = result["disk"]
    space = ""
    if result["download_bytes"]:
        freed = ""
        if disk["reclaimable_bytes"]:
            freed = " (+%s once what is in the way is removed)" % human(disk["reclaimable_bytes"])
        space = "; %s free on %s%s, %s needed (with %s reserve)" % (
            human(disk["free_bytes"]), disk["path"], freed,
            human(disk["needed_bytes"]), human(params["reserve_bytes"]))
    return "%s: %s%s" % (subject, "; ".join(result["problems"]), space)


def run(module):
    params = module.params
    info = None
    expected = None
    refused = []
    if params["repo"]:
        endpoint = params["endpoint"] or hf_hub.DEFAULT_ENDPOINT
        for problem in (hf_hub.repo_id_error(params["repo"]), hf_hub.endpoint_error(endpoint)):
            if problem:
                module.fail_json(msg=problem)
        if not params["revision"]:
            module.fail_json(msg="revision must not be empty")
        hub = hf_hub.Hub(endpoint, params["token"], params["timeout"], params["validate_certs"], params["ca_path"])
        info, expected, refused = hub_listing(module, hub)
    try:
        result = model_files.check(params["path"], expected, params["verify"], params["hash_cache"],
                                   write_cache=not module.check_mode)
    except model_files.ModelDirError as exc:
        module.fail_json(msg=str(exc))
    # problems() names every unsafe name, the hub's refused entries among them.
    result["unsafe_names"].extend(refused)
    result["problems"] = model_files.problems(result, expected is not None)
    result["complete"] = not result["problems"]

    free, measured = model_files.free_space(params["path"])
    reclaimable = result.pop("reclaimable_bytes") + result["incomplete"]["bytes"]
    needed = result["download_bytes"] + params["reserve_bytes"] if result["download_bytes"] else 0
    result["disk"] = {"path": measured, "free_bytes": free, "reclaimable_bytes": reclaimable, "needed_bytes": needed,
                      "enough": free + reclaimable >= needed}
    result["remove"] += [entry["path"] for entry in result["incomplete"]["files"]]
    if expected is not None and result["download_bytes"]:
        to_fetch = sum(len(result[key]) for key in ("missing", "wrong_size", "damaged", "not_regular"))
        result["problems"].insert(0, "%d of %d files to download, %s" % (
            to_fetch, result["files"], human(result["download_bytes"])))
    result.update(changed=False, commit=info["commit"] if info else None, gated=info["gated"] if info else None,
                  path=params["path"], repo=params["repo"], revision=params["revision"] if info else None)
    result["message"] = summary(params, info, result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            repo=dict(type="str"),
            revision=dict(type="str", default="main"),
            endpoint=dict(type="str", fallback=(env_fallback, ["HF_ENDPOINT"])),
            token=dict(type="str", no_log=True, fallback=(env_fallback, ["HF_TOKEN"])),
            verify=dict(type="str", choices=["hash", "size"], default="hash"),
            hash_cache=dict(type="bool", default=True),
            check_access=dict(type="bool", default=True),
            reserve_bytes=dict(type="int", default=1024 * 1024 * 1024),
            timeout=dict(type="int", default=30),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if module.params["reserve_bytes"] < 0 or module.params["timeout"] < 1:
        module.fail_json(msg="reserve_bytes must be >= 0 and timeout >= 1")
    module.params["path"] = os.path.abspath(module.params["path"])
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
