# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.sglang_flag_errors import FilterModule, sglang_flag_errors

CARD = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4}


def test_the_model_cards_settings_pass():
    assert sglang_flag_errors(dict(CARD, api_key="k", extra_flags={"context-length": 262144}, extra_args=["--x"])) == []
    assert sglang_flag_errors(dict(CARD, speculative_eagle_topk=4, speculative_num_draft_tokens=8)) == []
    assert sglang_flag_errors({"speculative_algorithm": "", "speculative_num_steps": None}) == []
    assert FilterModule().filters()["sglang_flag_errors"] is sglang_flag_errors


def test_a_draft_token_count_sglang_would_replace_is_refused_with_the_reason():
    assert sglang_flag_errors(dict(CARD, speculative_num_draft_tokens=5)) == [
        "sglang_service_speculative_num_draft_tokens is 5, but with sglang_service_speculative_eagle_topk 1 SGLang "
        "replaces it by sglang_service_speculative_num_steps + 1 = 4; set it to 4"]


def test_the_speculative_flags_are_a_set():
    assert sglang_flag_errors(dict(CARD, speculative_eagle_topk=None, speculative_num_draft_tokens="")) == [
        "sglang_service_speculative_algorithm is set: set sglang_service_speculative_num_steps, "
        "sglang_service_speculative_eagle_topk, sglang_service_speculative_num_draft_tokens together (missing: "
        "sglang_service_speculative_eagle_topk, sglang_service_speculative_num_draft_tokens); SGLang would choose the "
        "others itself, and the verification needs the draft-token count the server runs with"]
    assert sglang_flag_errors(dict(CARD, speculative_num_steps=0, speculative_eagle_topk="two")) == [
        "sglang_service_speculative_num_steps must be a positive integer",
        "sglang_service_speculative_eagle_topk must be a positive integer"]


@pytest.mark.parametrize("settings, variable", [
    ({"extra_flags": {"api-key": "k"}}, "sglang_service_extra_flags['api-key'] is --api-key"),
    ({"extra_flags": {"admin-api-key": "k"}}, "sglang_service_extra_flags['admin-api-key'] is --admin-api-key"),
    ({"extra_args": ["--port", "1", "--api-key", "k"]}, "sglang_service_extra_args[2] is --api-key"),
    ({"extra_args": ["--api-key=k"]}, "sglang_service_extra_args[0] is --api-key"),
    ({"extra_args": ["--ap", "k"]}, "sglang_service_extra_args[0] is --ap"),
])
def test_a_secret_flag_in_the_extra_flags_or_args_is_refused(settings, variable):
    errors = sglang_flag_errors(settings)
    assert len(errors) == 1 and errors[0].startswith(variable + ", a secret flag")
    assert "set sglang_service_api_key instead" in errors[0]


def test_a_second_config_file_is_refused_only_when_the_key_travels_in_one():
    assert sglang_flag_errors({"extra_args": ["--config", "/etc/x.yaml"]}) == []
    assert sglang_flag_errors({"extra_args": ["--config", "/etc/x.yaml"], "api_key": "k"}) == [
        "sglang_service_extra_args[0] is --config, but SGLang takes one --config file and the API key travels in it; "
        "give those flags in sglang_service_extra_flags instead"]
    assert len(sglang_flag_errors({"extra_flags": {"config": "/etc/x.yaml"}, "api_key": "k"})) == 1


@pytest.mark.parametrize("key, why", [("-k", "starts with '-'"), (" k", "whitespace"), ("k ", "whitespace")])
def test_an_api_key_sglang_or_http_would_mangle_is_refused_without_showing_it(key, why):
    errors = sglang_flag_errors({"api_key": key})
    assert len(errors) == 1 and why in errors[0] and errors[0].startswith("sglang_service_api_key ")


def test_inputs_of_the_wrong_shape_fail_the_filter():
    with pytest.raises(AnsibleFilterError):
        sglang_flag_errors({"extra_flags": ["api-key"]})
    with pytest.raises(AnsibleFilterError):
        sglang_flag_errors({"extra_args": "--api-key k"})
