# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_flag_errors
short_description: Say which of a server's flag settings SGLang would refuse, change silently or leak
version_added: 0.1.0
author: llmops.serving contributors (@llmops)
description:
  - For the input check of a role that renders SGLang's command line (an C(assert) on an empty result). Each message
    names the role variable (O(prefix) and the key of the input) and says why; the API key is never shown.
  - With a speculative algorithm set, C(num_steps), C(eagle_topk) and C(num_draft_tokens) must all be positive integers
    (SGLang resolves an incomplete set itself, and the verification needs the draft-token count it runs with); with
    C(eagle_topk) 1, SGLang 0.5.23 forces C(num_draft_tokens) to C(num_steps + 1), so another value is refused rather
    than silently replaced.
  - A secret flag (C(--api-key), C(--admin-api-key), C(--ssl-keyfile-password) and the abbreviations SGLang accepts)
    in C(extra_flags) or C(extra_args) is refused, as it would put the secret in the server's command line, which every
    local user can read.
  - With an API key set, C(--config) in C(extra_flags) or C(extra_args) is refused, since SGLang takes one C(--config) file and
    the key travels in it. A key that starts with C(-) (SGLang's parser would take it for a flag) or with or ends in
    whitespace (HTTP header values are trimmed, so no request could present it) is refused.
options:
  _input:
    description: C(speculative_algorithm), C(speculative_num_steps), C(speculative_eagle_topk),
      C(speculative_num_draft_tokens), C(extra_flags) (a mapping), C(extra_args) (a list) and C(api_key); missing keys
      count as empty.
    type: dict
    required: true
  prefix:
    description: Prefix of the role's variable names, for the messages.
    type: str
    default: sglang_service_
"""

EXAMPLES = r"""
- name: Check the server's flags
  ansible.builtin.assert:
    that: _errors | length == 0
    fail_msg: "{{ _errors | join('; ') }}"
    quiet: true
  vars:
    _errors: >-
      {{ {'speculative_algorithm': 'NEXTN', 'speculative_num_steps': 3, 'speculative_eagle_topk': 1,
          'speculative_num_draft_tokens': 5} | llmops.serving.sglang_flag_errors }}
    # -> the draft-token count SGLang would replace by 4
"""

RETURN = r"""
_value:
  description: The messages; empty when SGLang takes the flags as given.
  type: list
  elements: str
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.serving.plugins.module_utils.redact import is_secret_flag

SPECULATIVE_TRIO = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def _unset(value):
    return value is None or (isinstance(value, str) and not value.strip())


def _positive_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value) or None
    return None


def _speculative_errors(settings, prefix):
    algorithm = settings.get("speculative_algorithm")
    if _unset(algorithm):
        return []
    names = {key: prefix + key for key in SPECULATIVE_TRIO}
    missing = [names[key] for key in SPECULATIVE_TRIO if _unset(settings.get(key))]
    if missing:
        return ["%sspeculative_algorithm is set: set %s together (missing: %s); SGLang would choose the others itself, "
                "and the verification needs the draft-token count the server runs with"
                % (prefix, ", ".join(names.values()), ", ".join(missing))]
    values = {key: _positive_int(settings.get(key)) for key in SPECULATIVE_TRIO}
    errors = ["%s must be a positive integer" % names[key] for key in SPECULATIVE_TRIO if values[key] is None]
    if errors:
        return errors
    steps, topk, draft = (values[key] for key in SPECULATIVE_TRIO)
    if topk == 1 and draft != steps + 1:
        errors.append("%s is %d, but with %s 1 SGLang replaces it by %s + 1 = %d; set it to %d"
                      % (names["speculative_num_draft_tokens"], draft, names["speculative_eagle_topk"],
                         names["speculative_num_steps"], steps + 1, steps + 1))
    return errors


def _flag_words(settings, prefix):
    """(variable label, flag) for every flag name in extra_flags and every --word in extra_args."""
    flags = settings.get("extra_flags") or {}
    if not isinstance(flags, Mapping):
        raise AnsibleFilterError("sglang_flag_errors: extra_flags must be a mapping")
    args = settings.get("extra_args") or []
    if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
        raise AnsibleFilterError("sglang_flag_errors: extra_args must be a list")
    found = [("%sextra_flags[%r]" % (prefix, str(name)), "--" + str(name)) for name in flags]
    found += [("%sextra_args[%d]" % (prefix, index), str(word).partition("=")[0]) for index, word in enumerate(args)
              if str(word).startswith("--")]
    return found


def sglang_flag_errors(settings, prefix="sglang_service_"):
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("sglang_flag_errors expects a mapping of the server's flag settings")
    errors = _speculative_errors(settings, prefix)
    api_key = settings.get("api_key") or ""
    for label, flag in _flag_words(settings, prefix):
        if is_secret_flag(flag):
            errors.append("%s is %s, a secret flag: it would put the secret on the server's command line, which every "
                          "local user can read; set %sapi_key instead" % (label, flag, prefix))
        elif flag == "--config" and api_key:
            errors.append("%s is --config, but SGLang takes one --config file and the API key travels in it; give "
                          "those flags in %sextra_flags instead" % (label, prefix))
    if not isinstance(api_key, str):
        errors.append("%sapi_key must be a string" % prefix)
    elif api_key.startswith("-"):
        errors.append("%sapi_key starts with '-': SGLang's parser would take it for a flag; choose another key" % prefix)
    elif api_key != api_key.strip():
        errors.append("%sapi_key starts or ends with whitespace: HTTP header values are trimmed, so no request could "
                      "present it" % prefix)
    return errors


class FilterModule:
    def filters(self):
        return {"sglang_flag_errors": sglang_flag_errors}
