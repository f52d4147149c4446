"""Holding the reference's engines to one instruction set: environment set before any of them loads.

Kept apart from `engines.py` (which imports torch): oneDNN, PyTorch's own dispatch and MKL read
these variables once, when their libraries load.
"""

from __future__ import annotations

import os
import sys

ISAS = ("avx2", "avx512")


def engine_environment(max_isa: str | None) -> dict[str, str]:
    """Sets and returns the environment that holds PyTorch and OpenVINO to `max_isa`: oneDNN's
    ONEDNN_MAX_CPU_ISA (OpenVINO's CPU plugin and PyTorch's convolutions; OpenVINO's executed
    graph then names the kernels it chose, `Engine.precision_report`), PyTorch's
    ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS. ONNX Runtime's MLAS has no such switch and
    picks by CPUID."""
    if not max_isa:
        return {}
    if max_isa not in ISAS:
        raise ValueError(f"--max-isa {max_isa}: one of {', '.join(ISAS)}")
    onednn = {"avx2": "AVX2", "avx512": "AVX512_CORE"}[max_isa]
    env = {"ONEDNN_MAX_CPU_ISA": onednn, "DNNL_MAX_CPU_ISA": onednn, "ATEN_CPU_CAPABILITY": max_isa,
           "MKL_ENABLE_INSTRUCTIONS": {"avx2": "AVX2", "avx512": "AVX512"}[max_isa]}
    os.environ.update(env)
    return env


def from_argv(argv: list[str] | None = None) -> dict[str, str]:
    """`--max-isa X` (or `--max-isa=X`) of a command line, applied before torch is imported."""
    argv = sys.argv if argv is None else argv
    for i, arg in enumerate(argv):
        if arg == "--max-isa" and i + 1 < len(argv):
            return engine_environment(argv[i + 1])
        if arg.startswith("--max-isa="):
            return engine_environment(arg.split("=", 1)[1])
    return {}
