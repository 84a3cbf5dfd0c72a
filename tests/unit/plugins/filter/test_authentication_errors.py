# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible_collections.llmops.serving.plugins.filter.authentication_errors import authentication_errors


def errors(authentication="api_key", api_key="", host="127.0.0.1"):
    return authentication_errors({"authentication": authentication, "api_key": api_key, "host": host}, "sglang_service")


def test_a_key_is_enough_on_any_address():
    for host in ("127.0.0.1", "0.0.0.0", "::", "10.0.0.5", "llm-a.example"):
        assert errors(api_key="sk-1", host=host) == []


def test_an_empty_key_is_refused_with_the_two_ways_out():
    [said] = errors(host="0.0.0.0")
    assert "sglang_service_api_key is empty" in said and "0.0.0.0" in said
    assert "an environment variable that a lookup reads is empty when it is unset" in said
    assert "sglang_service_authentication: none" in said


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost",
                                  "::ffff:127.0.0.1"])
def test_no_authentication_is_a_decision_taken_on_loopback(host):
    assert errors(authentication="none", host=host) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.213.0.11", "192.0.2.21", "localhost.example", "127.0.0.1 ",
                                  "localhost\n", "", "[::1", "::ffff:10.0.0.1"])
def test_no_authentication_beyond_loopback_is_refused(host):
    [said] = errors(authentication="none", host=host)
    assert "is not a loopback address" in said and "sglang_service_api_key" in said


def test_a_key_with_no_authentication_is_a_contradiction_and_the_key_is_not_shown():
    [said] = errors(authentication="none", api_key="sk-Secret-1")
    assert "remove the key or set sglang_service_authentication: api_key" in said
    assert "sk-Secret-1" not in said


@pytest.mark.parametrize("mode", ["", "None", None, "off", True])
def test_an_unknown_mode_is_named(mode):
    [said] = errors(authentication=mode, api_key="k")
    assert said.startswith("sglang_service_authentication must be one of api_key, none")


def test_values_that_are_not_strings_are_refused_without_showing_them():
    [said] = authentication_errors({"authentication": "api_key", "api_key": 12345, "host": "127.0.0.1"}, "sglang_router")
    assert said == "sglang_router_api_key and sglang_router_host must be strings"
