# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark the log-reading part of log_provenance on a 1 MiB and a 2 GiB log; fail when 2 GiB costs > 1.5x 1 MiB.

Run from the repository root:  .venv/bin/python tests/bench/bench_log_provenance.py [--runs N] [--max-ratio R]

What is timed is what log_provenance does with the file, without systemd or /proc: resolve the path (a current.log
symlink), read the header line and the tail (log_header.read_log_summary), and stat the path. The 2 GiB file is
sparse in the middle (truncate), with real text at the head and the tail, so it costs no disk space.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "collections"))

from ansible_collections.llmops.serving.plugins.module_utils import log_header  # noqa: E402  pylint: disable=wrong-import-position

MIB = 1024 ** 2
GIB = 1024 ** 3
HEADER = ("# llmops-serving instance=qwen36 deployment_id=" + "3f" * 32 + " invocation_id=6f1c3e0b9a8d4c2e8f7a6b5c4d3e2f10"
          " pid=4711 started_at=2026-11-29T19:45:01Z unit=sglang-qwen36.service\n")
# Synthetic lines in SGLang 0.5.23's decode-line format (see docs in /work/shared/reference/sglang.md); generated load, not a sample.
DECODE = ("[2026-11-29 {hh:02d}:{mm:02d}:{ss:02d} TP0] Decode batch, #running-req: 1, #full token: {tokens}, full token usage: 0.00, "
          "mamba num: 3, mamba usage: 0.03, accept len: 2.83, accept rate: 0.61, cuda graph: True, gen throughput (token/s): 93.65, "
          "#queue-req: 0\n")


def sglang_lines(count, first_second=0):
    lines = []
    for index in range(count):
        second = first_second + index
        lines.append(DECODE.format(hh=20 + second // 3600 % 4, mm=second // 60 % 60, ss=second % 60, tokens=257 + index))
    return "".join(lines).encode()


def make_real_log(path, size):
    """A log of real text, exactly ``size`` bytes."""
    body = sglang_lines(200)
    tail = sglang_lines(10, 7200)
    with open(path, "wb") as handle:
        handle.write(HEADER.encode())
        while handle.tell() + len(body) + len(tail) < size:
            handle.write(body)
        filler = size - handle.tell() - len(tail)
        if filler > 0:
            handle.write(b" " * (filler - 1) + b"\n")
        handle.write(tail)


def make_sparse_log(path, size):
    """Header and 1 MiB of real text at the start, a hole, then 1 MiB of real text at the end."""
    head = HEADER.encode() + sglang_lines(4000)
    tail = b"\n" + sglang_lines(4000, 3600)
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size - len(tail))
        handle.seek(0, os.SEEK_END)
        handle.write(tail)


def log_part_of_log_provenance(link):
    """What log_provenance does with the file (minus systemd and /proc)."""
    resolved = os.path.realpath(link)
    summary = log_header.read_log_summary(resolved)
    os.stat(resolved)
    if summary["header"] is None or summary["last_timestamp"] is None:
        raise RuntimeError("benchmark log unreadable: %r" % summary)
    return summary


def time_interleaved(links, runs):
    """Time every link ``runs`` times, alternating between them (and their order) so that load from other processes
    on the machine falls on all of them alike. Returns one list of seconds per link."""
    for link in links:
        log_part_of_log_provenance(link)  # warm the page cache for the header and tail, as in a real run
    samples = [[] for dummy in links]
    for run in range(runs):
        order = range(len(links)) if run % 2 == 0 else reversed(range(len(links)))
        for index in order:
            started = time.perf_counter()
            log_part_of_log_provenance(links[index])
            samples[index].append(time.perf_counter() - started)
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="timed runs per file (default 1000)")
    parser.add_argument("--max-ratio", type=float, default=1.5, help="fail when median(2 GiB) / median(1 MiB) exceeds this")
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="bench-log-provenance-")
    try:
        labels, sizes, links = [], [], []
        for label, size, maker in (("1 MiB", MIB, make_real_log), ("2 GiB", 2 * GIB, make_sparse_log)):
            path = os.path.join(workdir, "%s.log" % label.replace(" ", ""))
            maker(path, size)
            link = os.path.join(workdir, "current-%s.log" % label.replace(" ", ""))
            os.symlink(os.path.basename(path), link)
            labels.append(label)
            sizes.append(os.path.getsize(path))
            links.append(link)
        cases = list(zip(labels, sizes, time_interleaved(links, args.runs)))
    finally:
        shutil.rmtree(workdir)

    print("%-6s %14s %6s %12s %12s %12s" % ("log", "bytes", "runs", "median ms", "p90 ms", "max ms"))
    medians = []
    for label, size, samples in cases:
        ordered = sorted(samples)
        median = statistics.median(ordered)
        medians.append(median)
        print("%-6s %14d %6d %12.4f %12.4f %12.4f" % (
            label, size, len(samples), median * 1e3, ordered[int(len(ordered) * 0.9) - 1] * 1e3, ordered[-1] * 1e3))
    ratio = medians[1] / medians[0]
    verdict = "ok" if ratio <= args.max_ratio else "FAIL"
    print("ratio 2 GiB / 1 MiB (medians): %.3f (limit %.2f) %s" % (ratio, args.max_ratio, verdict))
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
