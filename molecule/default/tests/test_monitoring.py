"""sglang_monitoring with node_exporter: the textfile directory, the package's service pointed at it and running as
its own unprivileged user, and the verdict file served on /metrics by node_exporter itself."""

from __future__ import annotations

import pathlib

from ansible_collections.llmops.serving.tests.support.node_exporter import scrape_textfiles
from ansible_collections.llmops.serving.tests.support.promtool import check_metrics

TEXTFILE_DIR = "/srv/llmops-metrics"
VERDICT = TEXTFILE_DIR + "/llmops_sglang_verdict_molecule.prom"
LABELS = 'deployment_id="3f1c9c2e5b0f4a8f0b8de7c8e4a3f1d2c9b1e0a7d6c5b4a3f2e1d0c9b8a7f6e5",sglang_instance="molecule"'


def test_the_textfile_directory_is_root_owned_and_world_readable(host):
    directory = host.file(TEXTFILE_DIR)
    assert directory.is_directory
    assert (directory.user, directory.group, directory.mode) == ("root", "root", 0o755)


def test_node_exporter_runs_unprivileged_from_the_package_and_reads_that_directory(host):
    service = host.service("prometheus-node-exporter")
    assert service.is_enabled and service.is_running
    assert service.systemd_properties["User"] == "prometheus"
    assert host.file("/etc/default/prometheus-node-exporter").contains(
        '^ARGS="--collector.textfile.directory=%s"$' % TEXTFILE_DIR)
    main_pid = service.systemd_properties["MainPID"]
    assert "--collector.textfile.directory=%s" % TEXTFILE_DIR in host.file("/proc/%s/cmdline" % main_pid).content_string


def test_the_verdict_is_served_on_metrics(host):
    # node_exporter in the container, through its own HTTP endpoint on the container's loopback. The handler's restart
    # returns once the process is forked, not once it listens: curl waits for the port to accept (60 tries, 1 s apart).
    metrics = host.check_output("curl -sf --retry 60 --retry-delay 1 --retry-connrefused http://127.0.0.1:9100/metrics")
    assert "llmops_sglang_verdict_passed{%s} 1" % LABELS in metrics
    assert "node_textfile_scrape_error 0" in metrics


def test_the_file_passes_promtool_and_this_hosts_node_exporter(host, tmp_path):
    content = host.file(VERDICT).content_string
    assert check_metrics(content) == (0, "")
    pathlib.Path(tmp_path, "llmops_sglang_verdict_molecule.prom").write_text(content)
    assert "llmops_sglang_verdict_passed{%s} 1" % LABELS in scrape_textfiles(tmp_path)
