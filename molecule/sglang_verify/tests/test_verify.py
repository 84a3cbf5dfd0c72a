"""The verdicts of sglang_verify on the simulator: healthy, sampling loop, draft path, startup OOM."""

from __future__ import annotations

from verify_checks import BASE_ENV, converge, read_summary, with_fault

from ansible_collections.llmops.serving.tests.support.promtool import check_metrics
from ansible_collections.llmops.serving.tests.support.sglang_request_log import received_sampling

# sglang_verify_textfile_dir's default: where Debian's prometheus-node-exporter reads textfiles.
VERDICT_FILE = "/var/lib/prometheus/node-exporter/llmops_sglang_verdict_verify.prom"

# What the incident's client sent: temperature 0.7 and nothing else from the model card (thinking mode).
INCIDENT_SAMPLING = {"temperature": 0.7, "top_p": None, "top_k": None, "min_p": None, "presence_penalty": None,
                     "repetition_penalty": None}


def test_healthy_deployment_passes_with_a_complete_summary():
    summary = read_summary()
    assert summary["status"] == "passed", summary
    assert summary["probe_verdict"] == "healthy"
    assert len(summary["deployment_id"]) == 64 and len(summary["invocation_id"]) == 32
    assert summary["main_pid"] > 1
    assert summary["log_file"].endswith(f"-{summary['invocation_id']}.log")
    assert summary["accept_length"]["mean"] > 2.5
    assert summary["sampling"]["temperature"] == 1.0 and summary["sampling"]["presence_penalty"] == 0.0
    assert "verify-secret-key" not in str(summary)


def test_the_summary_sets_the_memory_plan_beside_the_pools_of_this_start():
    memory = read_summary()["memory_plan"]
    # The role's sizing on two A6000s serves what it asks (4 running requests, one request of the scenario's context).
    assert memory["fits"] is True and memory["serves_requested"] is True
    # The simulator sizes its pools with SGLang 0.5.23's arithmetic on the same GPU: the plan is exact.
    for pool in ("max_mamba_cache_size", "max_total_num_tokens", "max_running_requests"):
        assert memory["comparison"][pool]["error"] == 0, memory["comparison"]
    # Nothing capped: SGLang runs the 4 requested (it logs a cap only when the state pool holds fewer).
    assert "capped_running_requests" not in memory["actual"], memory["actual"]
    assert memory["comparison"]["max_running_requests"]["actual"] == memory["planned"]["max_running_requests"] == 4


def test_the_summary_says_which_card_values_the_server_applies_to_chat_requests():
    server = read_summary()["server_sampling"]
    assert sorted(server["applied"]) == ["min_p", "repetition_penalty", "temperature", "top_k", "top_p"], server
    assert not server["differs"]


def test_the_summary_has_the_container_preflight_and_the_canaries():
    summary = read_summary()
    # The container's GPU preflight before the wait: the kit's uvm node has the major of the kit's /proc/devices.
    preflight = summary["preflight"]
    assert preflight is not None and preflight["errors"] == 0, preflight
    assert not any(line.split()[1:2] == ["uvm_node"] for line in preflight["summary"]), preflight
    # The canaries after the probe: every one the role runs by default, none failed; the greedy tokens are the
    # reference the first verification of this model revision, release and flags recorded.
    canaries = {canary["name"]: canary for canary in summary["canaries"]}
    assert sorted(canaries) == sorted(["greedy_reference", "speculative_lossless", "tool_call", "long_context_acceptance",
                                       "soak"]), canaries
    assert not [canary for canary in canaries.values() if canary["passed"] is False], canaries
    assert canaries["greedy_reference"]["passed"] is True, canaries["greedy_reference"]


def published_verdict(host, summary):
    """The verdict file node_exporter reads, checked by promtool; the labels every sample of this run carries."""
    text = host.file(VERDICT_FILE).content_string
    status, said = check_metrics(text)
    assert status == 0, said + text
    return text, 'sglang_instance="verify",deployment_id="%s"' % summary["deployment_id"]


def test_the_verdict_is_published_for_node_exporter(host):
    summary = read_summary()
    text, labels = published_verdict(host, summary)
    assert "llmops_sglang_verdict_passed{%s} 1\n" % labels in text
    assert 'invocation_id="%s"' % summary["invocation_id"] in text
    assert "llmops_sglang_verification_deadline_timestamp_seconds{" not in text
    assert host.file(VERDICT_FILE).mode == 0o644


def test_readiness_is_noticed_within_two_seconds_of_the_ready_line():
    # A new deployment (another startup time) restarts the unit; the start must take longer than the tasks before the
    # wait, so the wait really waits for the ready line. On a loaded machine those tasks can outlast a start: then
    # nothing was measured (the summary says so), and the next deployment starts more slowly, up to three times.
    for startup in ("10", "30", "90"):
        run, summary = converge({"sglang_service_environment": dict(BASE_ENV, SGLANG_SIM_STARTUP_SECONDS=startup)})
        assert run.rc == 0, run.summary()
        lag = summary["ready_noticed_after_line_seconds"]
        if lag is not None:
            break
    assert lag is not None, "the server was ready before the wait began, even with a %s s start: nothing was measured" % startup
    print(f"\nreadiness: noticed {lag:.3f} s after the simulator's ready line (limit 2 s)")
    assert 0 <= lag <= 2.0


def test_sampling_loop_is_diagnosed_as_sampling_not_mtp(host):
    # SGLang's request log (level 1: no prompt text) shows the sampling values each request really got.
    flags = {"decode-log-interval": 10, "log-requests": True, "log-requests-level": 1}
    run, summary = converge(with_fault("degenerate", sglang_verify_probe_sampling=INCIDENT_SAMPLING,
                                       sglang_service_extra_flags=flags))
    assert run.rc != 0 and summary is not None, run.summary()
    # The incident's request (temperature 0.7 and nothing else) got the card's values for every key SGLang lets the
    # server supply (from the served generation_config.json); presence_penalty is the chat adapter's 0.0; the client's
    # temperature wins, and that is what loops.
    got = [params for params in received_sampling(host.file(summary["log_file"]).content_string)
           if params.get("temperature") == 0.7]
    assert got, "no probe request in the request log"
    for params in got:
        assert {key: params[key] for key in ("top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty")} == {
            "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0}, params
    assert summary["status"] == "failed"
    assert summary["probe_verdict"] == "sampling loop", summary
    assert "presence_penalty" in summary["message"] or "temperature" in summary["message"], summary["message"]
    assert "sampling loop" in run.text
    # A failed verification is published too, with the diagnosis, for the alert rules.
    text, labels = published_verdict(host, summary)
    assert "llmops_sglang_verdict_passed{%s} 0\n" % labels in text
    assert 'probe_diagnosis="sampling loop"' in text


def test_the_model_cards_values_cure_the_same_server():
    # Without greedy_reference: the simulator's degenerate fault is a model that loops outside its card's sampling,
    # greedy included (as Qwen's card warns), so its greedy tokens are not those the healthy model recorded - another
    # model's, as far as the reference can tell. The other canaries run.
    canaries = ["speculative_lossless", "tool_call", "long_context_acceptance", "soak"]
    run, summary = converge(with_fault("degenerate", sglang_verify_canaries=canaries))
    assert run.rc == 0, run.summary()
    assert summary["probe_verdict"] == "healthy"
    assert [item["name"] for item in summary["canaries"] if item["passed"] is not True] == [], summary["canaries"]


def test_low_acceptance_is_diagnosed_as_a_draft_path_problem():
    run, summary = converge(with_fault("low-accept"))
    assert run.rc != 0, run.summary()
    assert summary["status"] == "failed"
    assert "draft" in summary["message"].lower(), summary["message"]
    assert summary["accept_length"]["mean"] < 2.0


def test_startup_oom_fails_the_wait_within_seconds_quoting_sglang():
    run, summary = converge(with_fault("oom"))
    assert run.rc != 0
    assert summary["failed_step"] == "Wait for the current invocation to be ready"
    assert "Not enough GPU memory for hybrid" in summary["message"], summary["message"]
    print(f"\nstartup OOM: the wait failed after {summary['ready_after_seconds']} s")
    assert summary["ready_after_seconds"] < 15


def test_back_to_the_healthy_deployment():
    run, summary = converge()
    assert run.rc == 0, run.summary()
    assert summary["status"] == "passed"
