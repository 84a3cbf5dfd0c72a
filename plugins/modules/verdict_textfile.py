#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: verdict_textfile
short_description: Write the verification verdict of an SGLang instance as a node_exporter textfile
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - Renders the verification summary that the P(llmops.serving.sglang_verify#role) role assembles as Prometheus gauges
    in the text exposition format and writes it to C(<directory>/llmops_sglang_verdict_<instance>.prom), where
    node_exporter's textfile collector reads it.
  - The file is replaced atomically (a temporary file in the same directory whose name does not end in C(.prom), then a
    rename), so node_exporter never reads half a file; its mode is set before the content goes in.
  - 'Metrics (all gauges, labels C(sglang_instance) and C(deployment_id)): C(llmops_sglang_verdict_info) (value 1; labels
    C(unit), C(invocation_id), C(status), C(failed_step), C(probe_diagnosis), C(sampling_mode)),
    C(llmops_sglang_verdict_passed), C(llmops_sglang_verdict_timestamp_seconds),
    C(llmops_sglang_verification_deadline_timestamp_seconds) (pending only), C(llmops_sglang_verdict_ready_seconds),
    C(llmops_sglang_verdict_ready_notice_lag_seconds), C(llmops_sglang_verdict_decode_log_lines),
    C(llmops_sglang_verdict_accept_length), C(llmops_sglang_verdict_acceptance_ratio) and
    C(llmops_sglang_verdict_generation_throughput_tokens_per_second) (label C(stat)), C(llmops_sglang_verdict_draft_tokens),
    C(llmops_sglang_verdict_degenerate_samples), C(llmops_sglang_verdict_probe_diagnosis) (label C(diagnosis), 1 for the
    current one), C(llmops_sglang_verdict_planned) and C(llmops_sglang_verdict_actual) (label C(quantity)), and
    C(llmops_sglang_verdict_serves) (label C(quantity) - C(running_requests), C(requested_running_requests),
    C(kv_cache_tokens), C(context_length_tokens), C(full_context_requests)),
    C(llmops_sglang_verdict_canary_passed) (label C(canary) - C(greedy_reference), C(speculative_lossless),
    C(tool_call), C(long_context_acceptance), C(soak); 1 passed, 0 failed) and
    C(llmops_sglang_verdict_canary_accept_length) (label C(context) - C(short), C(long)).'
  - An unknown value is never written as NaN; its sample is left out. A canary that was skipped (C(passed) null) has no
    sample.
options:
  summary:
    description:
      - The verification summary (the role's C(sglang_verify_summary)). Keys used are C(instance), C(status) (C(passed),
        C(failed) or C(pending)), C(deployment_id), C(unit), C(invocation_id), C(failed_step), C(ready_after_seconds),
        C(ready_noticed_after_line_seconds), C(decode_lines), C(accept_length), C(acceptance_rate), C(gen_throughput),
        C(degenerate_samples), C(probe_verdict), C(sampling_mode) and, when present, C(plan) (quantity name to
        C(planned) and C(actual) values), C(serves) (the C(serves) of llmops.serving.sglang_memory_plan),
        C(canaries) and C(canary_acceptance); other keys are ignored, the free-text C(message) included.
      - C(canaries) is a list of C({name, passed, message}), the results of the canaries. C(name) is one of
        C(greedy_reference), C(speculative_lossless), C(tool_call), C(long_context_acceptance), C(soak); C(passed)
        true, false, or null (or missing) when the canary was skipped. An unknown or repeated name, or a C(passed) that
        is not a boolean, fails the module with a message and writes nothing. The C(message) is never written.
      - C(canary_acceptance) is C({short, long}), the speculative accept length (accepted tokens per verify pass, as
        SGLang's C(sglang:spec_accept_length)) the canary measured on a short and on a long prompt; null is unknown.
      - Required when O(state=present).
    type: dict
  instance:
    description:
      - Instance whose file to write or remove. Defaults to the C(instance) of O(summary); required when O(state=absent)
        and O(summary) is not given.
    type: str
  directory:
    description:
      - The textfile collector's directory (node_exporter's C(--collector.textfile.directory)); it must exist (the
        P(llmops.serving.sglang_monitoring#role) role creates it) unless O(create_directory=true).
      - The default is where Debian's C(prometheus-node-exporter) package reads textfiles.
    type: path
    default: /var/lib/prometheus/node-exporter
  create_directory:
    description:
      - Create a missing O(directory) (and its parents) with mode 0755, owned by the user the module runs as, as
        P(llmops.serving.sglang_monitoring#role) creates it by default. Reported as RV(directory_created).
      - Off, a missing directory is an error (outside check mode).
    type: bool
    default: false
  pending_timeout:
    description:
      - For a summary with C(status=pending) (a verification that starts now), how many seconds it may take; written as
        C(llmops_sglang_verification_deadline_timestamp_seconds), after which the alert rules treat it as abandoned.
      - Required for a pending summary.
    type: float
  mode:
    description: Mode of the file, as an octal string. Owner and group are the user the module runs as (root with become).
    type: str
    default: "0644"
  state:
    description: C(present) writes the file, C(absent) removes it (an instance that no longer exists).
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - llmops.serving.attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; the rendered metrics are returned. A missing directory is not an error in
      check mode (the task that creates it did not run either); the module then predicts the write.
  diff_mode:
    support: full
    details: Shows the file before and after.
notes:
  - The verdict's timestamp is part of the content, so each write of a verdict is a change. The sglang_verify role treats
    the file as a report (C(changed_when=false)), as it does for the JSON summary.
  - The P(llmops.serving.sglang_monitoring#role) role creates the directory and ships the alert and recording rules that
    read these metrics (C(roles/sglang_monitoring/files/prometheus/) in the collection).
seealso:
  - module: llmops.serving.spec_decode_stats
  - module: llmops.serving.generation_probe
  - name: Prometheus text exposition format
    description: The format of the file.
    link: https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
  - name: node_exporter textfile collector
    description: How node_exporter reads the file.
    link: https://github.com/prometheus/node_exporter#textfile-collector
"""

EXAMPLES = r"""
- name: Write the verdict for node_exporter
  llmops.serving.verdict_textfile:
    summary: "{{ sglang_verify_summary }}"
  changed_when: false

- name: Announce a verification that may take up to 30 minutes
  llmops.serving.verdict_textfile:
    summary:
      instance: qwen36
      unit: sglang-qwen36.service
      deployment_id: "{{ expected_deployment_id }}"
      status: pending
    pending_timeout: 1800

- name: Remove the verdict of an instance that was removed
  llmops.serving.verdict_textfile:
    instance: qwen36
    state: absent
"""

RETURN = r"""
path:
  description: The textfile.
  returned: always
  type: str
  sample: /var/lib/prometheus/node-exporter/llmops_sglang_verdict_qwen36.prom
directory_created:
  description: Whether O(directory) was created (or would be, in check mode).
  returned: always
  type: bool
metrics:
  description: The content written (or that would be written in check mode); empty when O(state=absent).
  returned: always
  type: str
  sample: |
    # HELP llmops_sglang_verdict_passed 1 when the verification passed, 0 when it failed.
    # TYPE llmops_sglang_verdict_passed gauge
    llmops_sglang_verdict_passed{sglang_instance="qwen36",deployment_id="3f1c9c2e"} 1
"""

import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.serving.plugins.module_utils.atomic_file import atomic_write, read_bytes
from ansible_collections.llmops.serving.plugins.module_utils.deployment_layout import instance_name_error
from ansible_collections.llmops.serving.plugins.module_utils.verdict_metrics import (
    STATUS_PENDING,
    render_verdict,
    textfile_name,
)


def _file_name_error(instance):
    error = instance_name_error(instance)
    if error is None and any(ord(char) < 0x20 or char == "\x7f" for char in instance):
        error = "instance %r contains control characters" % instance
    return error


def _existing(path):
    """(content, mode) of the current file, or (None, None) when there is none; a non-regular file is an error."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(info.st_mode):
        raise OSError("%s exists and is not a regular file" % path)
    return read_bytes(path).decode("utf-8", errors="replace"), stat.S_IMODE(info.st_mode)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            summary=dict(type="dict"),
            instance=dict(type="str"),
            directory=dict(type="path", default="/var/lib/prometheus/node-exporter"),
            create_directory=dict(type="bool", default=False),
            pending_timeout=dict(type="float"),
            mode=dict(type="str", default="0644"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "present", ["summary"])],
        required_one_of=[("summary", "instance")],
        supports_check_mode=True,
    )
    params = module.params
    summary = params["summary"] or {}
    instance = params["instance"] or summary.get("instance")
    error = _file_name_error(instance or "")
    if error:
        module.fail_json(msg=error)
    if summary and summary.get("instance") not in (None, instance):
        module.fail_json(msg="instance %r differs from the summary's instance %r" % (instance, summary.get("instance")))
    try:
        mode = int(params["mode"], 8)
    except ValueError:
        module.fail_json(msg="mode %r is not an octal number" % params["mode"])
    directory = params["directory"]
    path = os.path.join(directory, textfile_name(instance))
    result = dict(changed=False, path=path, metrics="", directory_created=False)
    if not os.path.isdir(directory) and params["create_directory"] and params["state"] == "present":
        result["directory_created"] = True
        if not module.check_mode:
            try:
                os.makedirs(directory, mode=0o755)
                os.chmod(directory, 0o755)  # whatever the umask: node_exporter runs as another user
            except OSError as exc:
                module.fail_json(msg="cannot create the textfile directory %s: %s" % (directory, exc.strerror or exc), **result)
    if not os.path.isdir(directory):
        if module.check_mode:
            # In check mode the task that creates the directory did not run either: predict the write.
            result["changed"] = params["state"] == "present"
            module.exit_json(msg="the textfile directory %s does not exist (yet)" % directory, **result)
        module.fail_json(msg="the textfile directory %s does not exist: create it (node_exporter reads the directory given to "
                             "--collector.textfile.directory)" % directory, **result)
    try:
        before, before_mode = _existing(path)
    except OSError as exc:
        module.fail_json(msg=str(exc), **result)

    if params["state"] == "absent":
        result["changed"] = before is not None
        if module._diff:
            result["diff"] = dict(before=before or "", after="", before_header=path, after_header=path)
        if result["changed"] and not module.check_mode:
            os.unlink(path)
        module.exit_json(**result)

    now = time.time()
    deadline = None
    if summary.get("status") == STATUS_PENDING:
        if params["pending_timeout"] is None or params["pending_timeout"] <= 0:
            module.fail_json(msg="a pending summary needs pending_timeout (seconds the verification may take)", **result)
        deadline = now + params["pending_timeout"]
    try:
        content = render_verdict(summary, now, deadline)
    except ValueError as exc:
        module.fail_json(msg="cannot render the verdict: %s" % exc, **result)
    result.update(metrics=content, changed=content != before or mode != before_mode)
    if module._diff:
        result["diff"] = dict(before=before or "", after=content, before_header=path, after_header=path)
    if result["changed"] and not module.check_mode:
        try:
            atomic_write(path, content.encode("utf-8"), mode)
        except OSError as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
