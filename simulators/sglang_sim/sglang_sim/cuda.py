# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What torch's CUDA sees through NVIDIA's driver, for the simulator: which GPUs, how much memory, who holds it.

The driver is the stand-in (simulators/standins/nvidia_driver/nvidia_standin.py), which the NVIDIA installer
stand-in puts beside the userspace driver's libraries; it owns every rule about GPUs (which nodes this process may
open, CUDA_VISIBLE_DEVICES, the node's memory ledger). This module only asks it what torch would ask libcuda:

- load_driver: as torch loads libcuda, from SGLANG_SIM_NVIDIA_STANDIN_DIR (tests) or the installed directory:
  nvidia_standin.py, imported from its path, and its driver.json. No driver, NVML failing to initialise or no GPU this
  process can open: torch sees no CUDA device.
- Cuda.devices: torch.cuda's devices, the usable GPUs (PCI order) as CUDA_VISIBLE_DEVICES selects and orders them.
- Cuda.nvidia_smi_memory_capacity_mib: utils/common.py: get_nvgpu_memory_capacity, which runs nvidia-smi (every GPU
  the container can use, whatever CUDA_VISIBLE_DEVICES says) and takes the smallest memory.total.
- RankDevice: one scheduler rank's GPU: torch.cuda.set_device (CUDA's invalid device ordinal), the device nodes a CUDA
  process keeps open, and its memory in the ledger (the CUDA context, then the weights, then the pools), failing with
  torch's OutOfMemoryError when the GPU does not have it free.
"""
from __future__ import annotations

import importlib.util
import io
import math
import os
import re

STANDIN_DIR_ENV = "SGLANG_SIM_NVIDIA_STANDIN_DIR"
# Where simulators/standins/nvidia_installer puts the driver stand-in (beside libcuda.so).
INSTALLED_DIR = "/usr/lib/x86_64-linux-gnu/nvidia-standin"
MODULE_FILE = "nvidia_standin.py"
CONFIG_FILE = "driver.json"
MIB = 1 << 20

# The torch frames of the tracebacks (illustrative line numbers, torch 2.9).
TORCH_SITE = "/usr/local/lib/python3.12/dist-packages/torch"
# c10/cuda/CUDAException.cpp: c10_cuda_check_implementation adds these lines to every CUDA error;
# get_cuda_error_help adds the hint for an invalid device ordinal.
CUDA_ERROR_TAIL = ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
                   "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                   "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
INVALID_ORDINAL_HELP = "GPU device may be out of range, do you have enough GPUs?"
# torch/cuda/__init__.py: _lazy_init -> torch._C._cuda_init() when CUDA finds no driver or no device.
NO_DRIVER = ("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver "
             "from http://www.nvidia.com/Download/index.aspx")
NO_DEVICES = "No CUDA GPUs are available"


def load_driver(environ=None):
    """(nvidia_standin module, Driver) as torch would find libcuda, or (None, None) when there is no driver.

    The module is imported from its file, not through sys.path, so nothing else named nvidia_standin is shadowed."""
    environ = os.environ if environ is None else environ
    directory = environ.get(STANDIN_DIR_ENV) or INSTALLED_DIR
    path = os.path.join(directory, MODULE_FILE)
    if not os.path.isfile(path):
        return None, None
    try:
        spec = importlib.util.spec_from_file_location("sglang_sim_nvidia_standin", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        driver = module.Driver.from_config(os.path.join(directory, CONFIG_FILE))
    except (OSError, ValueError, KeyError, ImportError, SyntaxError, AttributeError):
        # A broken userspace driver loads no better than a missing one.
        return None, None
    return module, driver


def format_size(size_bytes):
    """c10/cuda/CUDACachingAllocator.cpp: format_size - how torch's OOM message writes a size."""
    if size_bytes <= 1024:
        return "%d bytes" % size_bytes
    if size_bytes <= 1048576:
        return "%.2f KiB" % (size_bytes / 1024.0)
    if size_bytes <= 1073741824:
        return "%.2f MiB" % (size_bytes / 1048576.0)
    return "%.2f GiB" % (size_bytes / 1073741824.0)


def format_traceback(frames, exception_text):
    lines = ["Traceback (most recent call last):"]
    for path, line, function, code in frames:
        lines.append('  File "%s", line %d, in %s' % (path, line, function))
        lines.append("    " + code)
    lines.append(exception_text)
    return "\n".join(lines) + "\n"


class CudaFailure(Exception):
    """What torch raises in the rank: the exception line(s) of its traceback and torch's own frames."""

    def __init__(self, text, torch_frames=()):
        super().__init__(text)
        self.text = text
        self.torch_frames = list(torch_frames)

    def traceback(self, frames):
        """The traceback a scheduler logs: its own frames, then torch's, then the exception."""
        return format_traceback(list(frames) + self.torch_frames, self.text)


_SET_DEVICE_FRAME = ("%s/cuda/__init__.py" % TORCH_SITE, 567, "set_device", "torch._C._cuda_setDevice(device)")
_LAZY_INIT_FRAME = ("%s/cuda/__init__.py" % TORCH_SITE, 412, "_lazy_init", "torch._C._cuda_init()")
_TORCH_FUNCTION_FRAME = ("%s/utils/_device.py" % TORCH_SITE, 104, "__torch_function__", "return func(*args, **kwargs)")


class Cuda:
    """torch.cuda as this process sees it through the driver stand-in (``driver`` None: no driver)."""

    def __init__(self, module=None, driver=None, environ=None):
        self.module = module
        self.driver = driver
        self.environ = os.environ if environ is None else environ

    @classmethod
    def load(cls, environ=None):
        module, driver = load_driver(environ)
        return cls(module, driver, environ)

    def devices(self):
        """torch.cuda's devices in ordinal order; [] when CUDA finds no driver or no device this process can use."""
        if self.driver is None:
            return []
        try:
            usable = self.driver.usable_gpus()
        except self.module.NvmlError:
            return []
        return self.module.cuda_visible_devices(usable, self.environ.get("CUDA_VISIBLE_DEVICES"))

    def is_available(self):
        """torch.cuda.is_available()."""
        return bool(self.devices())

    def no_device_error(self):
        """What torch.cuda's lazy initialisation raises when it finds no device."""
        return NO_DRIVER if self.driver is None or self._nvml_fails() else NO_DEVICES

    def _nvml_fails(self):
        try:
            self.driver.init()
        except self.module.NvmlError:
            return True
        return False

    def nvidia_smi_memory_capacity_mib(self):
        """utils/common.py: get_nvgpu_memory_capacity - the smallest memory.total that
        `nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits` prints, None when it fails."""
        if self.driver is None:
            return None
        out, err = io.StringIO(), io.StringIO()
        if self.module.nvidia_smi(["--query-gpu=memory.total", "--format=csv,noheader,nounits"], self.driver, out, err):
            return None
        values = [float(value) for value in out.getvalue().strip().split("\n") if re.match(r"^\d+(\.\d+)?$", value.strip())]
        # A GPU whose memory the driver cannot tell (no ledger) gives no figure, as MIG mode does.
        values = [value for value in values if value > 0]
        return min(values) if values else None

    def memory_capacity_mib(self):
        """get_nvgpu_memory_capacity, else its _cuda_mem_fallback: the smallest total of torch's devices."""
        capacity = self.nvidia_smi_memory_capacity_mib()
        if capacity is None and self.driver is not None:
            totals = [self.driver.memory_total_mib(gpu) for gpu in self.devices()]
            totals = [total for total in totals if total > 0]
            capacity = float(min(totals)) if totals else None
        return capacity


class RankDevice:
    """One scheduler rank's GPU, held as CUDA holds it for the process's life: the device nodes open, the memory
    allocated in the node's ledger (in this process: the allocation dies with it)."""

    def __init__(self, cuda, gpu_id, process_name, parent_pid):
        self.cuda = cuda
        self.gpu_id = gpu_id
        self.process_name = process_name
        # The launcher: its other children are this server's other ranks, whose memory is not "others'".
        self.parent_pid = parent_pid
        self.gpu = None
        self.allocation = None
        self.node_fds = []
        self.context_mib = 0

    # ---- torch.cuda.set_device ----------------------------------------------------------------------------------
    def set_device(self, context_mib):
        """torch.cuda.set_device(gpu_id): the CUDA context is created on the GPU (context_mib of its memory) and the
        process keeps /dev/nvidiactl, /dev/nvidia-uvm and its /dev/nvidiaN open. Raises CudaFailure as torch does."""
        devices = self.cuda.devices()
        if not devices:
            raise CudaFailure("RuntimeError: " + self.cuda.no_device_error(), [_SET_DEVICE_FRAME, _LAZY_INIT_FRAME])
        if self.gpu_id >= len(devices):
            raise CudaFailure("torch.AcceleratorError: CUDA error: invalid device ordinal\n%s\n%s"
                              % (INVALID_ORDINAL_HELP, CUDA_ERROR_TAIL), [_SET_DEVICE_FRAME])
        self.gpu = devices[self.gpu_id]
        driver = self.cuda.driver
        try:
            self.allocation = driver.allocate(self.gpu, context_mib, self.process_name)
        except self.cuda.module.OutOfMemory:
            self.gpu = None
            raise CudaFailure("torch.AcceleratorError: CUDA error: out of memory\n" + CUDA_ERROR_TAIL,
                              [_SET_DEVICE_FRAME]) from None
        except OSError as error:
            # Not a state a real driver can be in: say what the stand-in lacks rather than invent torch's words.
            self.gpu = None
            raise CudaFailure("RuntimeError: sglang-sim cannot simulate this GPU's memory: %s (the driver stand-in's "
                              "driver.json names no usable ledger_dir)" % error, [_SET_DEVICE_FRAME]) from None
        self.context_mib = context_mib
        # The driver said these nodes may be opened; a kit node has no driver behind it (ENXIO on a real open), so
        # the process holds it by path, which /proc/PID/fd shows the same way.
        for path in (os.path.join(driver.dev_dir, "nvidiactl"), os.path.join(driver.dev_dir, "nvidia-uvm"),
                     driver.node_path(self.gpu)):
            try:
                self.node_fds.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
            except OSError:
                pass  # nvidia-uvm exists only where the UVM module's node was passed in

    # ---- memory -------------------------------------------------------------------------------------------------
    def _ours(self, record):
        """Whether a ledger record is this server's: this process's or another rank's (a child of the launcher)."""
        if record.get("host") != os.uname().nodename:
            return False
        pid = record.get("pid")
        if pid == os.getpid():
            return True
        try:
            with open("/proc/%d/stat" % pid, "rb") as handle:
                stat = handle.read()
            return int(stat[stat.rindex(b")") + 2:].split()[1]) == self.parent_pid
        except (OSError, ValueError, IndexError, TypeError):
            return False

    def others_mib(self, gpu):
        """Memory other processes hold on ``gpu`` (not this server's ranks)."""
        return sum(record["used_mib"] for record in self.cuda.driver.ledger.live(gpu) if not self._ours(record))

    def total_mib(self, gpu=None):
        return self.cuda.driver.memory_total_mib(gpu or self.gpu)

    def free_mib(self):
        """torch.cuda.mem_get_info's free memory of this rank's GPU."""
        driver = self.cuda.driver
        return driver.memory_total_mib(self.gpu) - driver.memory_used_mib(self.gpu)

    def pre_model_load(self, gpu_ids):
        """utils/common.py: get_available_gpu_memory(distributed=True) - the free memory of each of ``gpu_ids`` (this
        node's ranks) once every rank holds its context, in MiB: {gpu_id: (total, held by others, free)}."""
        figures = {}
        devices = self.cuda.devices()
        for gpu_id in gpu_ids:
            if gpu_id >= len(devices):
                continue
            gpu = devices[gpu_id]
            total, others = self.total_mib(gpu), self.others_mib(gpu)
            figures[gpu_id] = (total, others, total - others - self.context_mib)
        return figures

    def grow(self, mib, request_bytes, allocated_bytes):
        """Hold ``mib`` MiB in all from now on, as PyTorch allocating tensors of ``request_bytes`` each on top of the
        ``allocated_bytes`` it has; when the GPU does not have them free, keep the tensors that fitted and raise
        torch's OutOfMemoryError (CudaFailure) for the first that did not."""
        try:
            self.allocation.resize(mib)
            return
        except self.cuda.module.OutOfMemory as refused:
            # free_mib counts this process's allocation as free (the ledger resizes it): the room is the rest.
            room = max(refused.free_mib - self.allocation.mib, 0) * MIB
        fitted = int(room // request_bytes) * request_bytes if request_bytes else 0
        if fitted:
            try:
                self.allocation.resize(self.allocation.mib + int(math.ceil(fitted / float(MIB))))
                allocated_bytes += fitted
            except self.cuda.module.OutOfMemory:
                pass
        raise CudaFailure(self.out_of_memory_text(request_bytes, allocated_bytes), [_TORCH_FUNCTION_FRAME])

    def out_of_memory_text(self, request_bytes, allocated_bytes):
        """c10/cuda/CUDACachingAllocator.cpp: the OutOfMemoryError message, with reportProcessMemoryInfo's line for
        every other process holding memory on the GPU (the pid its driver recorded)."""
        driver = self.cuda.driver
        total = driver.memory_total_mib(self.gpu) * MIB
        free = max(self.free_mib(), 0) * MIB
        others = "".join("Process %d has %s memory in use. " % (record["pid"], format_size(record["used_mib"] * MIB))
                         for record in driver.ledger.live(self.gpu) if record["id"] != self.allocation.record["id"])
        return ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of "
                "which %s is free. %sIncluding non-PyTorch memory, this process has %s memory in use. Of the allocated "
                "memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. If reserved but "
                "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                "fragmentation.  See documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                % (format_size(request_bytes), self.gpu_id, format_size(total), format_size(free), others,
                   format_size(self.allocation.mib * MIB), format_size(allocated_bytes), format_size(0)))
