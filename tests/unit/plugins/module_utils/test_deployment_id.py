from __future__ import annotations

from ansible_collections.llmops.serving.plugins.module_utils.deployment_id import (
    compute_deployment_id,
    env_file_keys,
)

UNIT = b"[Service]\nExecStart=/usr/local/libexec/llmops-serving/sglang-launch --tp-size 2\n"


def test_env_file_keys_ignores_values_comments_and_blank_lines():
    text = "# secrets\nSGLANG_API_KEY=s3cr3t\n\n export HF_TOKEN = hf_abc\n; old\nNOT A LINE\n"
    assert env_file_keys(text) == ["SGLANG_API_KEY", "HF_TOKEN"]


def test_id_is_stable_and_order_independent():
    a = compute_deployment_id({"/u": UNIT, "/l": b"launcher"}, {"/e": "K=1\n"}, {"model_path": "/m", "versions": {"a": 1, "b": 2}})
    b = compute_deployment_id({"/l": b"launcher", "/u": UNIT}, {"/e": "K=1\n"}, {"versions": {"b": 2, "a": 1}, "model_path": "/m"})
    assert a == b
    assert len(a) == 64


def test_secret_values_do_not_change_the_id_but_names_do():
    base = compute_deployment_id({"/u": UNIT}, {"/e": "SGLANG_API_KEY=one\n"}, {})
    rotated = compute_deployment_id({"/u": UNIT}, {"/e": "SGLANG_API_KEY=two\n"}, {})
    added = compute_deployment_id({"/u": UNIT}, {"/e": "SGLANG_API_KEY=one\nHF_TOKEN=x\n"}, {})
    assert base == rotated
    assert base != added


def test_every_part_changes_the_id():
    base = compute_deployment_id({"/u": UNIT}, {}, {"model_revision": "r1"})
    assert compute_deployment_id({"/u": UNIT + b"#"}, {}, {"model_revision": "r1"}) != base
    assert compute_deployment_id({"/u": UNIT}, {}, {"model_revision": "r2"}) != base
    assert compute_deployment_id({"/u2": UNIT}, {}, {"model_revision": "r1"}) != base
