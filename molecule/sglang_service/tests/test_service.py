"""The deployed unit, its account, files and permissions, and the server it runs."""

from __future__ import annotations

import json

from sglang_checks import (CURRENT_LOG, LOG_DIR, PORT, RECORD, SERVED_MODEL, SIM, STAGED_MODEL, UNIT, deployment_id,
                           wait_ready)

from ansible_collections.llmops.serving.tests.support.ansible_run import call_module

API_KEY = "molecule-secret-key"


def test_service_account_is_an_unprivileged_system_user(host):
    user = host.user("sglang")
    assert user.exists
    assert user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"


def test_unit_is_enabled_running_and_owned_by_systemd(host):
    service = host.service(UNIT)
    assert service.is_enabled
    assert service.is_running
    props = service.systemd_properties
    assert props["KillMode"] == "control-group"
    assert props["Restart"] == "on-failure"
    assert props["User"] == "sglang"
    assert props["NoNewPrivileges"] == "yes"
    assert props["ProtectSystem"] == "strict"
    assert props["PrivateTmp"] == "yes"
    assert props["DevicePolicy"] == "closed"
    assert props["TimeoutStopUSec"] == "1min"


def test_secrets_stay_in_root_only_files(host):
    env = host.file("/etc/llmops-serving/molecule/server.env")
    assert env.user == "root" and env.group == "root"
    assert env.mode == 0o600
    # The API key travels as a systemd credential (tests/test_hardening_secrets.py), not in the environment file.
    assert API_KEY not in env.content_string
    secrets = host.file("/etc/llmops-serving/molecule/server-secrets.yaml")
    assert (secrets.user, secrets.group, secrets.mode) == ("root", "root", 0o600)
    assert API_KEY in secrets.content_string
    assert API_KEY not in host.file(f"/etc/systemd/system/{UNIT}").content_string
    assert API_KEY not in host.check_output(f"systemctl show {UNIT}")


def test_server_is_main_pid_with_exactly_the_rendered_argv(host):
    props = wait_ready(host)
    main_pid = int(props["MainPID"])
    argv = host.file(f"/proc/{main_pid}/cmdline").content.split(b"\0")[:-1]
    argv = [word.decode() for word in argv]
    # The simulator is a Python console script: the kernel shows the interpreter, then the script.
    assert argv[1] == SIM
    assert argv[2:] == [
        # The served model directory: the staged model linked, generation_config.json with the card's values.
        "--model-path", SERVED_MODEL, "--served-model-name", "qwen3.6-27b", "--host", "127.0.0.1",
        "--port", str(PORT), "--tp-size", "2", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mamba-full-memory-ratio", "0.8",
        "--max-running-requests", "4", "--context-length", "131072", "--reasoning-parser", "qwen3",
        "--tool-call-parser", "qwen3_coder",
        "--enable-metrics",
        "--preferred-sampling-params",
        '{"min_p":0.0,"presence_penalty":0.0,"repetition_penalty":1.0,"temperature":1.0,"top_k":20,"top_p":0.95}',
        "--config", f"/run/credentials/{UNIT}/sglang-secrets.yaml",
        # Added by the launcher (metrics are on): the labels that tie each sample on /metrics to this start.
        "--extra-metric-labels", '{"sglang_instance": "molecule", "deployment_id": "%s", "invocation_id": "%s"}' % (
            deployment_id(host), props["InvocationID"]),
    ]


def test_server_gets_the_staged_model_with_the_cards_generation_config(host):
    wait_ready(host)
    served = host.file(SERVED_MODEL)
    assert served.is_directory and (served.user, served.mode) == ("root", 0o755)
    # Every entry of the staged model is linked; the staged model itself is never written to.
    for name in ("config.json", ".cache"):
        assert host.file(f"{SERVED_MODEL}/{name}").linked_to == f"{STAGED_MODEL}/{name}"
    assert not host.file(f"{STAGED_MODEL}/generation_config.json").exists
    written = json.loads(host.file(f"{SERVED_MODEL}/generation_config.json").content_string)
    assert written == {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
                       "repetition_penalty": 1.0}
    # SGLang logs at start which values it takes for chat requests: the card's, from the served directory.
    log = host.file(CURRENT_LOG).content_string
    assert ("Using default chat sampling params from model generation config: {'repetition_penalty': 1.0, "
            "'temperature': 1.0, 'top_k': 20, 'top_p': 0.95, 'min_p': 0.0}") in log


def test_the_plan_ran_before_the_restart_and_matches_the_pools_of_this_start(host):
    wait_ready(host)
    current = host.file(CURRENT_LOG).linked_to
    plan, failed = call_module(
        host, "llmops.serving.sglang_memory_plan", model_path=STAGED_MODEL, gpu_memory_mib=49140, startup_log=current,
        flags={"tp_size": 2, "max_running_requests": 4, "mamba_full_memory_ratio": 0.8, "context_length": 131072,
               "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
               "speculative_num_draft_tokens": 4})
    assert not failed and plan["fits"] and plan["serves_requested"], plan
    # What SGLang allocated serves every requested request and one of the full context.
    assert plan["serves"]["source"] == "startup log", plan["serves"]
    assert plan["serves"]["running_requests"] == plan["serves"]["requested_running_requests"] == 4
    assert plan["serves"]["context_length"] == 131072 and plan["serves"]["full_context_requests"] >= 1
    comparison = plan["comparison"]
    # The simulator sizes its pools with SGLang 0.5.23's arithmetic, as the plan does: the same numbers.
    assert comparison["max_mamba_cache_size"]["error"] == 0
    assert comparison["max_total_num_tokens"]["error"] == 0
    assert comparison["max_running_requests"]["actual"] == plan["pools"]["max_running_requests"]


def test_metrics_carry_the_instance_deployment_and_start(host):
    props = wait_ready(host)
    metrics = host.check_output(f"curl -sf http://127.0.0.1:{PORT}/metrics")
    labels = 'sglang_instance="molecule",deployment_id="%s",invocation_id="%s"' % (deployment_id(host),
                                                                                   props["InvocationID"])
    assert "sglang:spec_accept_length{" in metrics
    assert all(labels in line for line in metrics.splitlines() if line.startswith("sglang:spec_accept"))


def test_tensor_parallel_workers_live_in_the_unit_cgroup(host):
    props = wait_ready(host)
    cgroup = host.check_output(f"systemctl show -p ControlGroup --value {UNIT}")
    pids = host.check_output(f"systemctl show -p MainPID --value {UNIT}")
    titles = host.check_output(
        "for p in $(cat /sys/fs/cgroup/systemd%s/cgroup.procs); do cat /proc/$p/comm; done" % cgroup
    ).split()
    assert pids == props["MainPID"]
    assert {"sglang::schedul", "sglang::detoken"} <= {t[:15] for t in titles}


def test_log_header_names_this_deployment_invocation_and_pid(host):
    props = wait_ready(host)
    log = host.file(CURRENT_LOG)
    assert log.is_symlink
    target = log.linked_to
    assert target.startswith(LOG_DIR + "/") and target.endswith(f"-{props['InvocationID']}.log")
    header = host.file(target).content_string.splitlines()[0]
    fields = dict(word.split("=", 1) for word in header.split()[2:])
    assert header.startswith("# llmops-serving ")
    assert fields["deployment_id"] == deployment_id(host)
    assert fields["invocation_id"] == props["InvocationID"]
    assert fields["pid"] == props["MainPID"]
    assert fields["unit"] == UNIT
    assert host.file(target).user == "sglang"
    assert host.file(target).mode == 0o640


def test_deployment_record_and_archive(host):
    record = json.loads(host.file(RECORD).content_string)
    assert len(record["deployment_id"]) == 64
    assert record["inputs"]["model_path"] == "/models/Qwen3.6-27B"
    archive = host.file(record["archive"])
    assert archive.is_directory and archive.mode == 0o700
    manifest = json.loads(host.file(record["archive"] + "/manifest.json").content_string)
    paths = {entry["path"] for entry in manifest["files"]}
    assert f"/etc/systemd/system/{UNIT}" in paths
    env_line = f"LLMOPS_DEPLOYMENT_ID={record['deployment_id']}"
    assert env_line in host.file("/etc/llmops-serving/molecule/deployment.env").content_string


def test_server_answers_with_the_api_key_and_refuses_without(host):
    wait_ready(host)
    ok = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {API_KEY}' http://127.0.0.1:{PORT}/v1/models")
    refused = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{PORT}/v1/models")
    assert ok.stdout == "200"
    assert refused.stdout == "401"


def test_log_pruner_keeps_the_newest_and_every_file_still_open(host):
    """sglang-log-prune KEEP leaves KEEP-1 earlier logs, oldest removed first, never one a process holds open."""
    work = "/var/tmp/prune-check"
    host.check_output(f"rm -rf {work} && mkdir -p {work}")
    for n in range(5):
        host.check_output(f"echo log{n} > {work}/2026010{n}T000000Z-{n:032x}.log && touch -d '2026-01-0{n + 1}' {work}/2026010{n}T000000Z-{n:032x}.log")
    oldest = f"{work}/20260100T000000Z-{0:032x}.log"
    host.run(f"nohup sleep 60 >> {oldest} 2>/dev/null & echo $! > /run/prune-holder.pid")
    holder = host.file("/run/prune-holder.pid").content_string.strip()
    try:
        out = host.check_output(f"/usr/local/libexec/llmops-serving/sglang-log-prune {work} 3")
        left = sorted(host.check_output(f"ls {work}").split())
        assert "still has it open" in out
        assert left == [
            f"20260100T000000Z-{0:032x}.log",  # oldest, but open: kept
            f"20260103T000000Z-{3:032x}.log",
            f"20260104T000000Z-{4:032x}.log",
        ]
        assert host.file(oldest).content_string == "log0\n", "a kept file must not be truncated"
    finally:
        host.run(f"kill {holder}")
        host.run(f"rm -rf {work}")
