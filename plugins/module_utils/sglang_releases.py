# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which SGLang release sizes its memory how: the behaviours the memory plan depends on, each with the release it
changed in, so that the plan follows the release that is installed (or pinned).

Read from the released code (the sglang wheels on PyPI, 0.4.0 to 0.5.23, compared release by release; paths under
``sglang/srt/``). A ``.postN`` release is taken as its base release: the post releases of 0.5.8 and later were checked
to carry their base's sizing code. Each behaviour:

- ``request_pool_plus_one`` (up to 0.4.6): ``ReqToTokenPool(size=max_num_reqs + 1)``, and the printed
  ``max_running_requests`` is ``min(max_total_num_tokens // 2 or the flag, that pool size)``: 2049 where later
  releases print 2048.
- ``explicit_requests`` - what an explicit ``--max-running-requests`` is capped by: nothing (up to 0.5.9), the estimate
  ``max(min(tokens / context_len * 512, 4096), 2048)`` (0.5.10: ``_resolve_max_num_reqs``), half the KV pool (0.5.14).
  Without the flag every release serves ``min(estimate, max_total_num_tokens // 2)``.
- ``state_pool`` (hybrid models) - 0.5.9 to 0.5.12: the speculative draft's intermediate state for every configured
  request is subtracted first, then the ratio split (``handle_max_mamba_cache``); 0.5.13: the joint solve of the state
  pool with the intermediate state sized from the requests the pool serves; 0.5.17: plus the padding slot in the budget
  (sgl-project/sglang#32184). Earlier releases (a fixed pool for Qwen3-Next in 0.5.2, the first ratio split in 0.5.4)
  are not modelled.
- ``extra_buffer_slots`` - the tracking slots of the ``extra_buffer`` strategy: +1 with speculative decoding, else +2
  (0.5.9); +2 with the overlap schedule, else +1 (0.5.10: ``_calculate_mamba_ratio``).
- ``auto_strategy`` - what ``auto`` resolves to: ``no_buffer`` (up to 0.5.13), ``extra_buffer`` with the overlap
  schedule (0.5.14, when the flag became ``--mamba-radix-cache-strategy``).
- ``draft_before_pools`` (0.5.14: sgl-project/sglang#23862, #28683) - the EAGLE/MTP draft's weights load before the
  pools are sized and its KV layers join the target's cell; before, the draft loads after the pools, out of the memory
  outside them, with a KV pool of its own.
- ``multimodal_reservation`` (0.5.18: sgl-project/sglang#34141) - 100 MB (SGLANG_VLM_CACHE_SIZE_MB) off the budget of
  a multimodal model.
- ``gpu_bands`` - the default chunked prefill size and decode CUDA graph batch size by GPU memory: the 0.5.3 table
  (under 35 GiB: 2048 and 24 with TP below 4, 16 before 0.5.5) and the 0.5.20 one (20-35 GiB: 4096, 48;
  sgl-project/sglang#37898). 0.5.22 caps a default batch size at ``--max-running-requests``.
- ``default_fraction`` - ``mem_fraction_static`` when the flag is unset: the reserve formula of 0.5.3
  (``(gpu - reserve) / gpu``), with 8 MB per prefill CUDA graph size since 0.5.10 (prefill graphs on by default), a
  speculative reserve of 2 GiB (0.5.3), 4 GiB (0.5.10), none since 0.5.14 (the draft is measured). Earlier releases
  used tables the plan does not model: give ``mem_fraction_static`` for them.

A release newer than the newest known is planned with the newest known behaviours, and the plan says so.
"""

from __future__ import annotations

import re

OLDEST = (0, 4, 0)
NEWEST = (0, 5, 23)
NEWEST_TEXT = "0.5.23"
HYBRID_OLDEST = (0, 5, 9)
DEFAULT_FRACTION_OLDEST = (0, 5, 3)

_RELEASE_RE = re.compile(r"\A[vV]?(\d{1,3})\.(\d{1,3})\.(\d{1,4})(?:\.post(\d{1,3}))?(?:rc\d{1,3})?\Z")


class UnknownRelease(ValueError):
    """A version the plan cannot map to an SGLang release's behaviour."""


def parse_release(text):
    """(major, minor, patch) of an SGLang release number (``0.5.10``, ``0.5.10.post1``, ``v0.4.3``)."""
    value = str(text or "").strip()
    match = _RELEASE_RE.match(value)
    if not match:
        raise UnknownRelease("%r is not an SGLang release number (for example 0.5.23 or 0.5.10.post1); a source build "
                             "(0.0.0.devN) cannot be mapped to a release: give the release its checkout follows"
                             % value[:80])
    release = tuple(int(part) for part in match.groups()[:3])
    if release == (0, 0, 0):
        raise UnknownRelease("%s is a source build's version, not a release: give the release its checkout follows"
                             % value[:80])
    return release


def behaviours(version, hybrid=False):
    """The memory behaviours of an SGLang release: a dict of the names above, plus ``release`` (the text given),
    ``planned_as`` (the release whose behaviours are used) and ``notes``. UnknownRelease for a release older than the
    plan models (for hybrid models: older than 0.5.9)."""
    release = parse_release(version)
    notes = []
    if release < OLDEST:
        raise UnknownRelease("SGLang %s is older than the oldest release the plan models (%d.%d.%d)"
                             % ((version,) + OLDEST))
    if hybrid and release < HYBRID_OLDEST:
        raise UnknownRelease("SGLang %s sizes the hybrid state pool in a way the plan does not model (it models 0.5.9 "
                             "and later)" % version)
    planned = release
    if release > NEWEST:
        planned = NEWEST
        notes.append("SGLang %s is newer than the newest release the plan knows (%s); planned with %s's arithmetic"
                     % (version, NEWEST_TEXT, NEWEST_TEXT))
    at_least = planned.__ge__
    return {
        "release": str(version),
        "planned_as": "%d.%d.%d" % planned,
        "notes": notes,
        "request_pool_plus_one": not at_least((0, 4, 7)),
        "explicit_requests": "half_kv" if at_least((0, 5, 14)) else "estimate" if at_least((0, 5, 10)) else "as_given",
        "state_pool": "joint_padded" if at_least((0, 5, 17)) else "joint" if at_least((0, 5, 13)) else "subtract_first",
        "extra_buffer_slots": "by_overlap" if at_least((0, 5, 10)) else "by_speculative",
        "auto_strategy": "extra_buffer" if at_least((0, 5, 14)) else "no_buffer",
        "draft_before_pools": at_least((0, 5, 14)),
        "mamba_cap_warning": at_least((0, 5, 17)),
        "multimodal_reservation": at_least((0, 5, 18)),
        "gpu_bands": "0.5.20" if at_least((0, 5, 20)) else "0.5.3",
        "small_gpu_graph_bs": 24 if at_least((0, 5, 5)) else 16,
        "graph_bs_capped_by_requests": at_least((0, 5, 22)),
        "default_fraction": at_least(DEFAULT_FRACTION_OLDEST),
        "prefill_graph_reserve": at_least((0, 5, 10)),
        "speculative_reserve_mib": 0 if at_least((0, 5, 14)) else 4096 if at_least((0, 5, 10)) else 2048,
    }
