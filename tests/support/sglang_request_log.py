# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read SGLang's request log (--log-requests, text format) out of a server log, for checks of a deployment.

SGLang 0.5.23 (utils/request_logger.py: RequestLogger.log_received_request) writes one line per request as the
tokenizer manager receives it: ``[YYYY-mm-dd HH:MM:SS] Receive: obj=GenerateReqInput(rid='...', ...,
sampling_params={...}, ...)``. For /v1/chat/completions the sampling_params are those the OpenAI adapter built, so
they show what the server filled in from generation_config.json.
"""

from __future__ import annotations

import ast
import re

READY_LINE = "The server is fired up and ready to roll!"
_RECEIVE = re.compile(r"\] Receive: obj=GenerateReqInput\((?P<fields>.*)\)(?:, headers=\{.*\})?$")
_SAMPLING = re.compile(r"sampling_params=(\{.*?\}), return_logprob=")


def received_sampling(log_text):
    """The sampling_params of every client request logged after the last ready line (health checks left out)."""
    lines = log_text.splitlines()
    ready = max((index for index, line in enumerate(lines) if READY_LINE in line), default=-1)
    found = []
    for line in lines[ready + 1:]:
        match = _RECEIVE.search(line)
        if not match or "rid='HEALTH_CHECK_" in match["fields"]:
            continue
        sampling = _SAMPLING.search(match["fields"])
        if sampling:
            found.append(ast.literal_eval(sampling.group(1)))
    return found
