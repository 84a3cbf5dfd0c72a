"""Paths of the GPU preflight's test corpus (data/gpu_preflight, sources in its README.md)."""
from __future__ import annotations

import pathlib

DATA = pathlib.Path(__file__).resolve().parent / "data" / "gpu_preflight"
H200 = DATA / "h200-vm-580.159.04"
PUBLIC = DATA / "public"


def captured(path):
    """A capture-script file without its added first line (``$ command``) and last line (``[exit N]``)."""
    lines = path.read_text().splitlines(keepends=True)
    if lines and lines[0].startswith("$ "):
        lines = lines[1:]
    if lines and lines[-1].startswith("[exit "):
        lines = lines[:-1]
    return "".join(lines)


def public(name):
    return (PUBLIC / name).read_text()
