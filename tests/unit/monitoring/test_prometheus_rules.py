# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shipped Prometheus rules and Grafana dashboard: promtool checks and runs the rules' tests (tests/prometheus/),
every alert has a case where it fires and one where it must not, every recording rule is used, the SGLang metrics they
read exist in SGLang, and the dashboard's queries parse and read only what the rules record or the exporters write."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest
import yaml

from ansible_collections.llmops.serving.tests.support.promtool import promtool

REPO = pathlib.Path(__file__).resolve().parents[3]
RULES = REPO / "roles" / "sglang_monitoring" / "files" / "prometheus" / "llmops-sglang.rules.yml"
DASHBOARD = REPO / "roles" / "sglang_monitoring" / "files" / "grafana" / "llmops-sglang.json"
RULE_TESTS = sorted((REPO / "tests" / "prometheus").glob("*_test.yml"))
SGLANG_NAMES = pathlib.Path(__file__).parent / "data" / "sglang-0.5.23-metric-names.txt"


def run_promtool(*args, cwd=REPO):
    done = subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stdout + done.stderr


def rules():
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def alert_cases(test_documents):
    """{alertname: (cases where it must fire, cases where it must not)} over promtool test documents."""
    cases = {}
    for document in test_documents:
        for test in document.get("tests") or []:
            for check in test.get("alert_rule_test") or []:
                firing, quiet = cases.setdefault(check["alertname"], ([], []))
                (firing if check.get("exp_alerts") else quiet).append("%s @ %s" % (test["name"], check["eval_time"]))
    return cases


def coverage_gaps(alert_names, test_documents):
    """Alerts without a firing case or without a case where they must not fire."""
    cases = alert_cases(test_documents)
    gaps = []
    for name in alert_names:
        firing, quiet = cases.get(name, ([], []))
        if not firing:
            gaps.append("%s: no case where it fires" % name)
        if not quiet:
            gaps.append("%s: no case where it must not fire" % name)
    return gaps


def test_promtool_accepts_the_rule_file():
    status, said = run_promtool("check", "rules", str(RULES))
    assert status == 0, said
    assert "SUCCESS: %d rules found" % len(rules()) in said, said


def test_the_rule_tests_pass():
    assert RULE_TESTS, "no promtool tests under tests/prometheus"
    status, said = run_promtool("test", "rules", *[path.name for path in RULE_TESTS], cwd=RULE_TESTS[0].parent)
    assert status == 0, said


def test_the_rule_tests_fail_when_an_expectation_is_wrong(tmp_path):
    """The runner can fail: a firing case turned into a quiet one must be reported."""
    document = yaml.safe_load(RULE_TESTS[0].read_text())
    document["rule_files"] = [str(RULES)]
    firing = next(check for test in document["tests"] for check in test.get("alert_rule_test") or [] if check["exp_alerts"])
    firing["exp_alerts"] = []
    broken = tmp_path / "broken_test.yml"
    broken.write_text(yaml.safe_dump(document))
    status, said = run_promtool("test", "rules", broken.name, cwd=tmp_path)
    assert status != 0 and "FAILED" in said, said


def test_every_alert_has_a_firing_case_and_a_case_where_it_must_not_fire():
    alerts = [rule["alert"] for rule in rules() if "alert" in rule]
    assert len(alerts) == len(set(alerts)), "alert names repeat"
    documents = [yaml.safe_load(path.read_text()) for path in RULE_TESTS]
    assert coverage_gaps(alerts, documents) == []
    for document in documents:
        assert document["rule_files"] == ["../../roles/sglang_monitoring/files/prometheus/llmops-sglang.rules.yml"]


def test_the_coverage_check_reports_a_missing_case():
    documents = [{"tests": [{"name": "t", "alert_rule_test": [{"alertname": "A", "eval_time": "1m", "exp_alerts": []}]}]}]
    assert coverage_gaps(["A", "B"], documents) == ["A: no case where it fires", "B: no case where it fires",
                                                    "B: no case where it must not fire"]


def dashboard_queries():
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_recording_rule_is_read_by_an_alert_the_dashboard_or_a_test():
    expressions = " ".join([rule["expr"] for rule in rules()] + dashboard_queries())
    tests = " ".join(path.read_text() for path in RULE_TESTS)
    for rule in rules():
        if "record" in rule:
            name = rule["record"]
            used = expressions.count(name) > 0 or name in tests
            assert used, "%s is recorded but nothing reads it" % name


def test_alerts_have_severity_summary_and_description():
    for rule in rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            assert rule["annotations"].get("summary") and rule["annotations"].get("description"), rule["alert"]


def test_the_sglang_metrics_the_rules_read_exist_in_sglang():
    known = {line for line in SGLANG_NAMES.read_text().splitlines() if line and not line.startswith("#")}
    used = set(re.findall(r"\bsglang:[a-z_]+", " ".join(rule["expr"] for rule in rules())))
    assert used, "the rules read no SGLang metric"
    for name in sorted(used):
        base = re.sub(r"_(sum|count|bucket)$", "", name)
        assert name in known or base in known, "%s is not a metric of SGLang 0.5.23" % name


@pytest.mark.parametrize("prefix", ["llmops_sglang_verdict_", "llmops_sglang_verification_"])
def test_the_verdict_metrics_the_rules_read_are_written_by_the_renderer(prefix):
    from ansible_collections.llmops.serving.plugins.module_utils.verdict_metrics import verdict_families

    summary = {"instance": "i", "status": "passed", "probe_verdict": "healthy"}
    written = {family.name for family in verdict_families(summary, 1.0)}
    written |= {family.name for family in verdict_families(dict(summary, status="pending"), 1.0, deadline=2.0)}
    used = set(re.findall(r"\b%s[a-z_]+" % prefix, " ".join(rule["expr"] for rule in rules())))
    assert used <= written, used - written


def test_the_dashboard_is_well_formed():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    for panel in dashboard["panels"]:
        assert panel["title"] and set(panel["gridPos"]) == {"h", "w", "x", "y"}, panel
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        # The data source is chosen by the user (a variable), never a UID of one Grafana installation.
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert panel["targets"] and len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert set(re.findall(r"\$(\w+)", target["expr"])) <= variables, target["expr"]
    assert len(DASHBOARD.read_bytes()) < 16384, "the dashboard stays small"


def test_the_dashboard_queries_parse_and_read_what_exists(tmp_path):
    """promtool parses each query (as a recording rule); the names are recorded rules, verdict metrics or up."""
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    queries = dashboard_queries()
    for query in queries:
        for name in re.findall(r"(?<![\w\"])([a-z_]+:[a-z_:0-9]+|llmops_[a-z_]+|up)(?=[{\s]|$)", query):
            assert name in recorded or name.startswith("llmops_sglang_verdict_") or name == "up", (name, query)
    rule_file = tmp_path / "dashboard.rules.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:query_%d:check" % index, "expr": query.replace("$instance", ".*")}
        for index, query in enumerate(queries)]}]}))
    status, said = run_promtool("check", "rules", str(rule_file))
    assert status == 0, said
