# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_decode_stats
short_description: Speculative-decoding statistics of the current SGLang run, read from its log
description:
  - Reads an SGLang server log forward from a byte O(offset) (the position that
    P(llmops.serving.log_provenance#module) returns for the current invocation), so lines that an earlier
    run wrote are never counted.
  - Parses every era of SGLang's C(Decode batch) line (old C(Decode batch.) with a period, mid with a trailing
    comma after C(#queue-req), and the 0.5.23 form with C(#full token), C(mamba usage), C(accept len),
    C(accept rate) and C(cuda graph)), with or without the C([... DPn TPn]) prefix and milliseconds. Lines it
    does not know are skipped, never an error.
  - Returns the number of decode lines, the accept length (mean, min, max, last), the acceptance rate
    RECOMPUTED from the accept length, the generation throughput, whether the readiness line was seen, and
    error lines (tracebacks, out-of-memory, NCCL, exceptions) with their line numbers.
  - The acceptance rate that SGLang logs changed meaning between versions, so it is returned separately under
    RV(logged_accept_rate), labelled with its era, and never used for a verdict. The recomputed rate is
    C((accept_length - 1\) / (num_draft_tokens - 1\)), which with topk 1 is C((accept_length - 1\) / num_steps),
    SGLang 0.5.23's definition.
  - With thresholds (O(min_accept_length), O(min_throughput)) it fails with a diagnosis that names the suspect.
  - Only complete lines are read. A last line without its newline (the server is writing it) is left for the next
    read (RV(resume_offset) stops before it).
  - Numbers are read as SGLang prints them. A decode line with a value SGLang never prints (C(inf), C(nan),
    C(1e309), a negative or absurdly long number) is malformed. It is left out of the statistics, counted in
    RV(malformed_lines) and quoted in RV(malformed); with a threshold set, malformed lines fail the gate. No
    non-finite number ever appears in the result.
  - An accept length larger than O(num_draft_tokens) is impossible (a verify pass emits at most that many tokens,
    the bonus token included) and always fails, naming the bound. Either the log is not this server's, or
    O(num_draft_tokens) does not match the server's flags.
  - The log directory belongs to the service account, so the file is opened without following links or blocking and
    must be a regular file with one link (O(path) may be the directory's C(current.log), resolved the same way);
    anything else fails with a message that names what was found, and none of its bytes are read. Quoted lines
    have their secrets masked.
version_added: 0.1.0
author:
  - llmops.serving contributors (!UNKNOWN)
options:
  path:
    description: The SGLang log file, or the log directory's C(current.log).
    type: path
    required: true
  offset:
    description:
      - Byte position to start reading at; nothing before it is read.
      - Use the offset that P(llmops.serving.log_provenance#module) recorded for the current invocation.
      - An offset beyond the end of the file fails, because the log was truncated or re-created since the
        offset was taken, and the lines read would not belong to the run it was taken for.
    type: int
    default: 0
  num_steps:
    description: The server's C(--speculative-num-steps).
    type: int
    default: 3
  num_draft_tokens:
    description:
      - The server's C(--speculative-num-draft-tokens). Defaults to O(num_steps) + 1, which SGLang forces with
        C(--speculative-eagle-topk 1).
    type: int
  min_accept_length:
    description:
      - Fail when the mean accept length is below this value (for example V(2.5) with 4 draft tokens).
      - Also fails when no decode line carries an accept length (speculative decoding is not active).
    type: float
  min_throughput:
    description:
      - Fail when the median generation throughput (tokens/s) is below this value.
      - The median, not the mean, because the first decode line after an idle period divides its tokens by the
        idle time as well and reads far too low.
    type: float
  min_decode_lines:
    description:
      - Fail when fewer decode lines than this follow O(offset).
      - Defaults to V(1) when O(min_accept_length) or O(min_throughput) is set (a threshold cannot be checked
        without data) and to V(0) otherwise (the module then only reports).
    type: int
  fail_on_errors:
    description: Fail when any error line (traceback, out-of-memory, NCCL, exception) follows O(offset).
    type: bool
    default: false
  max_errors:
    description: How many error lines to return verbatim (the count of each kind is always complete).
    type: int
    default: 20
extends_documentation_fragment:
  - llmops.serving.attributes
  - llmops.serving.attributes.read_only
notes:
  - Line numbers in RV(errors) count from 1 at O(offset); the C(offset) of each entry is the absolute byte position.
  - SGLang prints a decode line every C(--decode-log-interval) decode iterations (default 40), on TP rank 0
    only (every DP rank with DP attention), so a short request may leave no decode line at all.
  - Memory stays bounded for any log size; the file is read in 64 KiB chunks.
seealso:
  - module: llmops.serving.log_provenance
  - module: llmops.serving.generation_probe
"""

EXAMPLES = r"""
- name: Speculative-decoding stats of the current run
  llmops.serving.spec_decode_stats:
    path: /var/log/sglang/qwen.log
    offset: "{{ log_info.offset }}"
    num_steps: 3
    min_accept_length: 2.5
    min_throughput: 20
  register: spec_stats

- name: Report only
  llmops.serving.spec_decode_stats:
    path: /var/log/sglang/qwen.log
    offset: "{{ log_info.offset }}"
  register: spec_stats
"""

RETURN = r"""
decode_lines:
  description: Number of C(Decode batch) lines after O(offset).
  returned: success
  type: int
  sample: 12
decode_lines_with_accept_length:
  description: Decode lines that carry C(accept len) (speculative decoding active).
  returned: success
  type: int
  sample: 12
accept_length:
  description: Accept length (tokens emitted per verify pass, bonus token included); null without data.
  returned: success
  type: dict
  sample: {"mean": 2.83, "min": 2.4, "max": 3.1, "last": 2.83}
acceptance_rate:
  description:
    - Acceptance rate recomputed from the accept length with the formula given in its C(formula) key, for each of mean, min,
      max and last; null without data.
  returned: success
  type: dict
  sample: {"mean": 0.61, "min": 0.4667, "max": 0.7, "last": 0.61, "formula": "(accept_length - 1) / (num_draft_tokens - 1); ...",
           "num_steps": 3, "num_draft_tokens": 4}
logged_accept_rate:
  description:
    - The C(accept rate) values SGLang logged, per era (old, mid, current), with count, mean, min, max, last and the
      era's definition. Informational only; the definitions differ, so they are not comparable across versions.
  returned: success
  type: dict
  sample: {"current": {"count": 12, "mean": 0.61, "min": 0.47, "max": 0.7, "last": 0.61, "definition": "correct drafts / ..."}}
gen_throughput:
  description: Generation throughput in tokens/s from the decode lines (mean, median, max, last); null without data.
  returned: success
  type: dict
  sample: {"mean": 90.1, "median": 93.6, "max": 95.0, "last": 93.65}
eras:
  description: Decode lines per log era (old, mid, current).
  returned: success
  type: dict
  sample: {"current": 12}
hybrid_lines:
  description: Decode lines in the hybrid-model form (C(#full token), C(mamba usage)).
  returned: success
  type: int
  sample: 12
ranks:
  description: TP ranks that wrote decode lines.
  returned: success
  type: list
  elements: int
  sample: [0]
cuda_graph:
  description: Decode lines with C(cuda graph) True and False.
  returned: success
  type: dict
  sample: {"true": 12, "false": 0}
running_req:
  description: Largest and last C(#running-req) of the decode lines; null without data.
  returned: success
  type: dict
  sample: {"max": 3, "last": 1}
first_decode_timestamp:
  description: Timestamp of the first decode line (as logged).
  returned: success
  type: str
  sample: "2026-07-30 13:35:12"
last_decode_timestamp:
  description: Timestamp of the last decode line (as logged).
  returned: success
  type: str
  sample: "2026-07-30 13:35:13"
ready_seen:
  description: Whether C(The server is fired up and ready to roll!) follows O(offset).
  returned: success
  type: bool
  sample: true
ready:
  description: Line number, byte offset and timestamp of the first readiness line; null when not seen.
  returned: success
  type: dict
  sample: {"line_number": 41, "offset": 10233, "timestamp": "2026-07-30 13:34:58"}
errors:
  description:
    - The first O(max_errors) error lines, each with kind, line_number (from O(offset)), offset and the line (secrets
      masked, shortened to 500 characters).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "oom_hybrid", "line_number": 17, "offset": 2211, "line": "[2026-07-30 13:34:01 TP0] Not enough GPU memory for hybrid ..."}]
error_counts:
  description: Number of error lines of each kind (traceback, oom_hybrid, cuda_oom, nccl, cuda_error, exception).
  returned: always
  type: dict
  sample: {"traceback": 1, "exception": 1}
error_total:
  description: Number of error lines.
  returned: always
  type: int
  sample: 0
malformed_lines:
  description: Decode lines left out because a value is not a number as SGLang prints it.
  returned: success
  type: int
  sample: 0
malformed:
  description:
    - The first O(max_errors) malformed decode lines, each with line_number (from O(offset)), offset, the fields whose
      values were refused (name and the text found) and the line (secrets masked, shortened to 500 characters).
  returned: success
  type: list
  elements: dict
  sample: [{"line_number": 7, "offset": 1520, "fields": {"accept_length": "inf"}, "line": "[2026-07-30 13:35:13 TP0] Decode batch, ..."}]
impossible_accept_length:
  description:
    - The largest accept length when it exceeds O(num_draft_tokens) (impossible; the module fails), with its line_number,
      offset, the bound and how many decode lines exceed it; null when every accept length is possible.
  returned: success
  type: dict
  sample: null
lines_read:
  description: Lines read after O(offset).
  returned: success
  type: int
  sample: 230
offset:
  description: The offset reading started at.
  returned: always
  type: int
  sample: 10233
resume_offset:
  description:
    - Byte position just after the last complete line read; pass it as O(offset) to read only newer lines.
    - A half-written last line lies after it, to be read whole next time.
  returned: success
  type: int
  sample: 48811
file_size:
  description: Size of the log file when it was opened.
  returned: always
  type: int
  sample: 48811
num_steps:
  description: The O(num_steps) used.
  returned: always
  type: int
  sample: 3
num_draft_tokens:
  description: The O(num_draft_tokens) used.
  returned: always
  type: int
  sample: 4
diagnosis:
  description: Why the module failed (one sentence per failed check); null when it did not.
  returned: always
  type: str
  sample: "accept length 1.31 (of 4 draft tokens) is below 2.5: speculative drafts are being rejected; ..."
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils import redact
from ansible_collections.llmops.serving.plugins.module_utils import service_files
from ansible_collections.llmops.serving.plugins.module_utils.sglang_log import collect_stats


# The most telling kinds first: a traceback header says less than the exception line that ends it.
ERROR_KIND_ORDER = ("oom_hybrid", "cuda_oom", "nccl", "cuda_error", "exception", "traceback")


def _quote_errors(stats, limit=3):
    quoted = []
    errors = sorted(stats.get("errors", []), key=lambda error: (
        ERROR_KIND_ORDER.index(error["kind"]) if error["kind"] in ERROR_KIND_ORDER else len(ERROR_KIND_ORDER), error["line_number"]))
    for error in errors[:limit]:
        quoted.append("line %s: %s" % (error["line_number"], error["line"].strip()))
    if not quoted:
        return ""
    more = stats.get("error_total", 0) - len(quoted)
    suffix = " (and %d more error lines)" % more if more > 0 else ""
    return " Errors in the log after the offset: " + " | ".join(quoted) + suffix


def malformed_summary(stats):
    """``2 decode lines carry values SGLang does not print (first: line 7: accept_length='inf')``."""
    first = stats["malformed"][0] if stats["malformed"] else None
    where = ""
    if first is not None:
        where = " (first: line %s: %s)" % (first["line_number"], ", ".join(
            "%s=%r" % item for item in sorted(first["fields"].items())))
    return "%d decode lines carry values SGLang does not print (it writes whole numbers and decimals such as 2.83; not inf, " \
           "nan, exponents or signs)%s" % (stats["malformed_lines"], where)


def impossible_problem(stats):
    """The sentence for an accept length above the draft-token count, or None."""
    impossible = stats["impossible_accept_length"]
    if impossible is None:
        return None
    return ("accept length %.2f on line %s (offset %s) is larger than num_draft_tokens=%d, the most tokens one verify pass can "
            "emit (the bonus token included; with --speculative-eagle-topk 1 that is num_steps + 1), and %d decode lines exceed "
            "that bound: impossible for a server with these settings, so either num_draft_tokens does not match the server's "
            "--speculative-num-draft-tokens or the log was not written by this server"
            % (impossible["value"], impossible["line_number"], impossible["offset"], impossible["bound"], impossible["lines"]))


def evaluate(stats, params):
    """Return a list of diagnosis sentences for the failed checks (empty when all pass).

    An impossible accept length fails whatever the thresholds; malformed decode lines fail a gate (a threshold is
    set), because the lines left out could be the ones that decide it.
    """
    problems = []
    num_draft_tokens = stats["num_draft_tokens"]
    thresholds_given = params["min_accept_length"] is not None or params["min_throughput"] is not None
    impossible = impossible_problem(stats)
    if impossible:
        problems.append(impossible)
    if stats["malformed_lines"] and thresholds_given:
        problems.append(malformed_summary(stats) + ": the gate does not pass on a log with lines it cannot read")
    min_decode_lines = params["min_decode_lines"]
    if min_decode_lines is None:
        min_decode_lines = 1 if thresholds_given else 0
    if stats["decode_lines"] < min_decode_lines:
        if stats["decode_lines"] == 0:
            if stats.get("error_total"):
                hint = "the server logged errors and generated nothing (it probably failed; see the errors below)"
            elif stats["ready_seen"]:
                hint = "the server has not generated anything yet (run a request first)"
            elif stats["lines_read"]:
                hint = "the server is not ready yet (no 'The server is fired up and ready to roll!' after the offset)"
            else:
                hint = "nothing was logged after it: the server is not writing to this log (is it the current run's file?)"
            problems.append("no decode lines after offset %d: %s" % (stats["offset"], hint))
        else:
            problems.append("only %d decode lines after offset %d (need %d): generate more tokens (SGLang logs one line per "
                            "--decode-log-interval decode steps)" % (stats["decode_lines"], stats["offset"], min_decode_lines))
        return problems
    if params["min_accept_length"] is not None and stats["decode_lines"]:
        accept_length = stats["accept_length"]
        if accept_length is None:
            problems.append("no decode line carries an accept length: speculative decoding is not active "
                            "(check --speculative-algorithm and the server_args line)")
        elif accept_length["mean"] < params["min_accept_length"]:
            problems.append("accept length %.2f (of %d draft tokens) is below %s: speculative drafts are being rejected; "
                            "the draft path (MTP head, --speculative-* flags, long context) is the suspect, not sampling"
                            % (accept_length["mean"], num_draft_tokens, params["min_accept_length"]))
    if params["min_throughput"] is not None and stats["decode_lines"]:
        throughput = stats["gen_throughput"]
        if throughput is None:
            problems.append("no decode line carries a gen throughput")
        elif throughput["median"] < params["min_throughput"]:
            detail = ""
            if stats["cuda_graph"]["false"]:
                detail = "; %d of %d decode lines ran without a CUDA graph" % (stats["cuda_graph"]["false"], stats["decode_lines"])
            problems.append("gen throughput %.2f token/s (median of %d decode lines) is below %s%s: check GPU contention, "
                            "--cuda-graph-max-bs-decode against #running-req (max %s) and the acceptance above"
                            % (throughput["median"], stats["decode_lines"], params["min_throughput"], detail,
                               (stats["running_req"] or {}).get("max")))
    if params["fail_on_errors"] and stats.get("error_total"):
        problems.append("%d error lines after offset %d" % (stats["error_total"], stats["offset"]))
    return problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            offset=dict(type="int", default=0),
            num_steps=dict(type="int", default=3),
            num_draft_tokens=dict(type="int", no_log=False),
            min_accept_length=dict(type="float"),
            min_throughput=dict(type="float"),
            min_decode_lines=dict(type="int"),
            fail_on_errors=dict(type="bool", default=False),
            max_errors=dict(type="int", default=20),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    offset = params["offset"]
    num_steps = params["num_steps"]
    num_draft_tokens = params["num_draft_tokens"] if params["num_draft_tokens"] is not None else num_steps + 1
    base = dict(changed=False, offset=offset, num_steps=num_steps, num_draft_tokens=num_draft_tokens,
                errors=[], error_counts={}, error_total=0, diagnosis=None)

    if offset < 0:
        module.fail_json(msg="offset must be >= 0, got %d" % offset, **base)
    if num_steps < 1 or num_draft_tokens < 2:
        module.fail_json(msg="num_steps must be >= 1 and num_draft_tokens >= 2", **base)
    if params["max_errors"] < 0:
        module.fail_json(msg="max_errors must be >= 0", **base)
    try:
        log = service_files.open_log(path)
    except service_files.RefusedFile as exc:
        module.fail_json(msg="cannot read the log: %s" % exc, **base)
    except OSError as exc:
        module.fail_json(msg="cannot read the log %s: %s" % (path, exc.strerror or exc), **base)
    with log:
        file_size = log.stat.st_size
        base["file_size"] = file_size
        if offset > file_size:
            diagnosis = ("the log %s is %d bytes, shorter than the offset %d: it was truncated or re-created since the offset "
                         "was taken, so its lines may belong to another run; take the offset again for the current invocation"
                         % (path, file_size, offset))
            base["diagnosis"] = diagnosis
            module.fail_json(msg=diagnosis, **base)
        try:
            stats = collect_stats(log.fd, offset=offset, num_steps=num_steps, num_draft_tokens=num_draft_tokens,
                                  max_errors=params["max_errors"])
        except OSError as exc:
            module.fail_json(msg="cannot read the log %s: %s" % (path, exc.strerror or exc), **base)
    stats.update(num_steps=num_steps, num_draft_tokens=num_draft_tokens, file_size=file_size)

    problems = evaluate(stats, params)
    result = redact.redact_deep(dict(base, **stats))
    if stats["malformed_lines"] and not problems:
        module.warn(malformed_summary(stats) + "; they were left out of the statistics.")
    if problems:
        diagnosis = "; ".join(problems)
        result["diagnosis"] = diagnosis
        module.fail_json(msg=redact.redact_text(diagnosis + "." + _quote_errors(stats)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
