# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_facts
short_description: Report the NVIDIA kernel module version, the userspace driver version and the visible GPUs
description:
  - Reads the version of the NVIDIA kernel module from O(proc_version_path) (inside an LXC container this is the
    HOST's module, because containers share the host kernel).
  - Reads the version of the userspace driver in two ways, so that a broken installation still reports one
    version; the version of every C(libnvidia-ml.so.<version>) under O(library_dirs) (the NVML library, named by
    NVIDIA's installer after the full driver version) and C(nvidia-smi --query-gpu=driver_version
    --format=csv,noheader), which only answers when NVML can talk to the kernel module.
  - Lists the GPUs nvidia-smi can use with their node index, UUID, PCI bus ID, device minor (C(/dev/nvidia<minor>),
    from the kernel module's information file, as nvidia-smi has no query field for it),
    memory and name (one C(--query-gpu) call), and every GPU the kernel module drives from
    C(gpus/<bus>/information) beside O(proc_version_path) (RV(driver_gpus)); inside a container the first are the
    GPUs passed to it, the second all GPUs of the host.
  - "Compares both versions. Any difference, even in the patch level, makes every NVML and CUDA call fail with
    C(Failed to initialize NVML: Driver/library version mismatch); RV(message) names both versions side by side."
  - "When nvidia-smi reports that mismatch and no C(libnvidia-ml.so.<version>) lies in O(library_dirs), RV(message)
    names the mismatch, the kernel module version and the version from nvidia-smi's C(NVML library version:) line
    (major.minor only; some drivers print only the error line). RV(userspace_version) stays null then, because the
    full version is not known."
  - Optionally reports the CUDA release of an C(nvcc) (O(nvcc)).
  - Never fails because something is missing (no kernel module, no nvidia-smi); it returns null for what it could
    not read. It fails only when a file or a program answers in a format it does not know.
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  proc_version_path:
    description:
      - The kernel module's version file. Point it at another file to read a saved copy.
    type: path
    default: /proc/driver/nvidia/version
  nvidia_smi:
    description:
      - The C(nvidia-smi) program, a name looked up on C(PATH) or a path.
    type: str
    default: nvidia-smi
  library_dirs:
    description:
      - Directories searched for C(libnvidia-ml.so.<version>).
    type: list
    elements: path
    default: [/usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu, /usr/lib64, /usr/lib]
  expected_gpus:
    description:
      - UUIDs of exactly the GPUs nvidia-smi should list here (a container's assigned GPUs). Each difference is a
        sentence in RV(gpu_problems), with why a missing GPU is not usable as far as this host can tell. Omitted or
        empty, nothing is compared.
    type: list
    elements: str
    default: []
  nvcc:
    description:
      - Path of an C(nvcc) whose C(--version) to report under RV(nvcc). Omitted, nvcc is not run.
    type: path
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - C(nvidia-smi) inside a container lists the GPUs whose device nodes the container can open; RV(gpu_count) is
    therefore the number of GPUs passed through, not the number in the host, and the C(index) of each of RV(gpus) is
    the container's own numbering. RV(driver_gpus) keeps the host's numbering.
  - A GPU's index (PCI bus order) and its device minor need not be equal; pass GPUs by minor, name them by index or
    UUID.
seealso:
  - name: NVIDIA driver README, the /proc interface
    description: What /proc/driver/nvidia/version contains.
    link: http://http.download.nvidia.com/XFree86/Linux-x86_64/460.80/README/procinterface.html
  - name: nvidia-smi documentation
    description: The query options and their output formats.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Read the host kernel module and the container's userspace versions
  llmops.serving.nvidia_driver_facts:
  register: nvidia

- name: Fail on a userspace that does not match the host
  ansible.builtin.fail:
    msg: "{{ nvidia.message }}"
  when: not nvidia.match

- name: Read the CUDA release of the installed toolkit
  llmops.serving.nvidia_driver_facts:
    nvcc: /usr/local/cuda-13.0/bin/nvcc
  register: toolkit
"""

RETURN = r"""
kernel_module_version:
  description: Version of the loaded NVIDIA kernel module; null when O(proc_version_path) does not exist.
  returned: always
  type: str
  sample: 580.95.05
kernel_module_flavor:
  description: C(open) or C(proprietary); null when no kernel module is visible.
  returned: always
  type: str
  sample: open
kernel_module_line:
  description: The NVRM line of O(proc_version_path), verbatim.
  returned: always
  type: str
  sample: "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-AF03-09-1)  ..."
userspace_version:
  description:
    - Version of the userspace driver; from nvidia-smi when it answers, else the only C(libnvidia-ml) version on
      disk; null when none or several different ones are installed.
  returned: always
  type: str
  sample: 580.95.05
userspace_version_source:
  description: Where RV(userspace_version) came from, C(nvidia-smi), C(libnvidia-ml) or null.
  returned: always
  type: str
  sample: nvidia-smi
nvml_library_versions:
  description: Versions of every C(libnvidia-ml.so.<version>) found under O(library_dirs), oldest first.
  returned: always
  type: list
  elements: str
  sample: [580.95.05]
nvidia_smi:
  description: What nvidia-smi said.
  returned: always
  type: dict
  contains:
    path:
      description: The program that ran; null when it was not found.
      type: str
      sample: /usr/bin/nvidia-smi
    rc:
      description: Exit status of the driver version query; null when nvidia-smi was not found.
      type: int
      sample: 0
    error:
      description: First line nvidia-smi printed when it failed, else null.
      type: str
      sample: "Failed to initialize NVML: Driver/library version mismatch"
    mismatch:
      description: Whether nvidia-smi failed with C(Driver/library version mismatch) (NVML and the kernel module differ).
      type: bool
      sample: true
    nvml_library_version:
      description: The C(NVML library version) nvidia-smi printed on a mismatch (major.minor only), else null.
      type: str
      sample: "570.124"
gpu_count:
  description: Number of GPUs nvidia-smi lists; null when nvidia-smi did not answer.
  returned: always
  type: int
  sample: 2
gpus:
  description:
    - The GPUs nvidia-smi lists, with C(index) (nvidia-smi's), C(uuid), C(bus_id), C(minor) (of C(/dev/nvidia<minor>), from
      the kernel module's list; null for a GPU it does not list), C(memory_total_mib) and C(name).
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "uuid": "GPU-c7b57be0-94ff-d352-a59b-d0ee00aeed43", "bus_id": "0000:18:00.0", "minor": 1,
            "memory_total_mib": 49140, "name": "NVIDIA RTX A6000"}]
driver_gpus:
  description:
    - Every GPU the kernel module drives, from its C(gpus/<bus>/information) files, in PCI bus order, with C(index)
      (that order, which is nvidia-smi's index on the host), C(uuid), C(bus_id), C(minor), C(name) and C(device_node),
      whether C(/dev/nvidia<minor>) is here - C(present) (NVIDIA's character device with that minor), C(missing) or
      C(other) (something else at that path). Empty when the directory does not exist.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "uuid": "GPU-c7b57be0-94ff-d352-a59b-d0ee00aeed43", "bus_id": "0000:18:00.0", "minor": 1,
            "name": "NVIDIA RTX A6000"}]
match:
  description:
    - True when the kernel module and the userspace have the same version and no C(libnvidia-ml) of another
      version is installed.
  returned: always
  type: bool
  sample: true
message:
  description: >-
    One sentence with both versions side by side and, on a mismatch, what it breaks; when nvidia-smi reports a
    mismatch, the kernel module version and the NVML library version it printed.
  returned: always
  type: str
  sample: >-
    host kernel module 580.95.05, container userspace 580.82.07: every CUDA/NVML call fails with 'Failed to
    initialize NVML: Driver/library version mismatch' until both are the same version
gpu_problems:
  description:
    - One sentence per GPU of O(expected_gpus) that nvidia-smi does not list (the host's index and device node, and
      whether the node is missing from here or present but not openable) and per listed GPU that is not expected;
      also when nvidia-smi does not answer. Empty without O(expected_gpus) or when they match.
  returned: always
  type: list
  elements: str
  sample: ["GPU-5e1d0003-5e1d-4c0a-9b7e-000000000003 (the host's GPU 3, /dev/nvidia2) is not usable here: its device node is not in the container"]
nvcc:
  description: The CUDA release of O(nvcc), with C(path), C(release), C(version) and C(major); null without O(nvcc).
  returned: always
  type: dict
  sample: {"path": "/usr/local/cuda-13.0/bin/nvcc", "release": "13.0", "version": "13.0.88", "major": 13}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import nvidia_gpus

from ansible_collections.llmops.serving.plugins.module_utils.nvidia_versions import (
    VersionParseError,
    compare_driver_versions,
    describe_nvml_mismatch,
    nvml_library_version_from_filename,
    parse_driver_version_query,
    parse_nvcc_version,
    parse_nvml_error,
    parse_proc_version,
    version_key,
)


def read_kernel_module(path):
    """The parsed version file, or None when it does not exist (no driver loaded, or no GPU passed through)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    return parse_proc_version(text)


def find_nvml_library_versions(library_dirs):
    versions = set()
    for directory in library_dirs:
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for name in names:
            version = nvml_library_version_from_filename(name)
            if version:
                versions.add(version)
    return sorted(versions, key=version_key)


def query_nvidia_smi(module, program):
    """Ask nvidia-smi for the driver version and the GPU list; never fails on a missing or failing nvidia-smi."""
    path = program if os.path.sep in program else module.get_bin_path(program)
    result = {"path": None, "rc": None, "error": None, "mismatch": False, "nvml_library_version": None, "versions": None,
              "gpus": None}
    if not path or not os.path.exists(path):
        return result
    result["path"] = path
    rc, out, err = module.run_command([path, "--query-gpu=driver_version", "--format=csv,noheader"])
    result["rc"] = rc
    if rc != 0:
        failure = parse_nvml_error(out + "\n" + err)
        result["error"] = failure["error"] or "nvidia-smi exited with %d and printed nothing" % rc
        result["mismatch"] = failure["mismatch"]
        result["nvml_library_version"] = failure["nvml_library_version"]
        return result
    result["versions"] = parse_driver_version_query(out)
    rc, out, err = module.run_command([path, "--query-gpu=" + ",".join(nvidia_gpus.GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"])
    if rc == 0:
        try:
            result["gpus"] = nvidia_gpus.parse_gpu_query(out)
        except nvidia_gpus.GpuError as exc:
            raise VersionParseError(str(exc)) from None
    elif rc == 6 or "No devices were found" in out:
        # NVML works, but this process can open none of the module's GPUs.
        result["gpus"] = []
    else:
        result["error"] = parse_nvml_error(out + "\n" + err)["error"] or "nvidia-smi --query-gpu exited with %d" % rc
    return result


def read_driver_gpus(proc_version_path):
    """The kernel module's GPUs (gpus/ beside its version file), each with whether its device node is here."""
    try:
        gpus = nvidia_gpus.read_driver_gpus(os.path.dirname(proc_version_path))
    except nvidia_gpus.GpuError as exc:
        raise VersionParseError(str(exc)) from None
    return [dict(gpu, device_node=nvidia_gpus.device_node_state("/dev/nvidia%d" % gpu["minor"], gpu["minor"])) for gpu in gpus]


def run(module):
    params = module.params
    kernel = read_kernel_module(params["proc_version_path"])
    library_versions = find_nvml_library_versions(params["library_dirs"])
    smi = query_nvidia_smi(module, params["nvidia_smi"])

    userspace_version, source = None, None
    if smi["versions"]:
        distinct = sorted(set(smi["versions"]), key=version_key)
        if len(distinct) > 1:
            raise VersionParseError("nvidia-smi reports different driver versions per GPU: %s" % ", ".join(distinct))
        userspace_version, source = distinct[0], "nvidia-smi"
    elif len(library_versions) == 1:
        userspace_version, source = library_versions[0], "libnvidia-ml"

    kernel_version = kernel["version"] if kernel else None
    match, message = compare_driver_versions(kernel_version, userspace_version, library_versions)
    if userspace_version is None and len(library_versions) > 1:
        message = ("host kernel module %s, container userspace: several libnvidia-ml versions (%s) and nvidia-smi "
                   "does not answer (%s)" % (kernel_version, ", ".join(library_versions), _smi_failure(smi)))
    elif smi["mismatch"] and kernel_version is not None and userspace_version is None:
        # No versioned libnvidia-ml where we looked: nvidia-smi's own report is the evidence; name it, not "not installed".
        message = describe_nvml_mismatch(kernel_version, smi["nvml_library_version"], library_versions)
    elif match and smi["error"]:
        match = False
        message = "%s, but nvidia-smi fails: %s" % (message.rsplit(":", 1)[0], _smi_failure(smi))

    nvcc = None
    if params["nvcc"]:
        nvcc = read_nvcc(module, params["nvcc"])

    driver_gpus = read_driver_gpus(params["proc_version_path"])
    gpus = nvidia_gpus.with_minors(smi["gpus"], driver_gpus) if smi["gpus"] is not None else None
    gpu_problems = []
    if params["expected_gpus"]:
        if gpus is None:
            gpu_problems.append("nvidia-smi does not list the GPUs here (%s)" % (_smi_failure(smi) if smi["error"] else "not installed"))
        else:
            gpu_problems = nvidia_gpus.visibility_problems(params["expected_gpus"], gpus, driver_gpus)
    return {
        "changed": False,
        "kernel_module_version": kernel_version,
        "kernel_module_flavor": kernel["flavor"] if kernel else None,
        "kernel_module_line": kernel["line"] if kernel else None,
        "userspace_version": userspace_version,
        "userspace_version_source": source,
        "nvml_library_versions": library_versions,
        "nvidia_smi": {key: smi[key] for key in ("path", "rc", "error", "mismatch", "nvml_library_version")},
        "gpu_count": len(gpus) if gpus is not None else None,
        "gpus": gpus or [],
        "driver_gpus": driver_gpus,
        "gpu_problems": gpu_problems,
        "match": match,
        "message": message,
        "nvcc": nvcc,
    }


def _smi_failure(smi):
    """nvidia-smi's error, with the NVML library version it printed (the library it really loaded) when it did."""
    if smi["nvml_library_version"]:
        return "%s (NVML library version %s)" % (smi["error"], smi["nvml_library_version"])
    return smi["error"]


def read_nvcc(module, path):
    if not os.path.exists(path):
        return None
    rc, out, err = module.run_command([path, "--version"])
    if rc != 0:
        raise VersionParseError("%s --version exited with %d: %s" % (path, rc, (err or out).strip()[:300]))
    parsed = parse_nvcc_version(out)
    parsed["path"] = path
    return parsed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            proc_version_path=dict(type="path", default="/proc/driver/nvidia/version"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            library_dirs=dict(type="list", elements="path",
                              default=["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]),
            nvcc=dict(type="path"),
            expected_gpus=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except VersionParseError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
