"""Finding external tools (nvcc, ptxas, cuobjdump, compute-sanitizer): one finder for every caller."""

from __future__ import annotations

import importlib.util
import os
import shutil


def _cuda_dirs() -> list[str]:
    dirs = [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return dirs + ["/usr/local/cuda/bin"]


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _from_toolkit(name: str) -> str | None:
    # Next to the nvcc on PATH first (the toolkit the user chose), then CUDA_HOME / CUDA_PATH / /usr/local/cuda.
    nvcc = shutil.which("nvcc")
    dirs = ([os.path.dirname(os.path.realpath(nvcc))] if nvcc else []) + _cuda_dirs()
    return next((p for d in dirs if _executable(p := os.path.join(d, name))), None) or shutil.which(name)


def _from_triton(name: str) -> str | None:
    spec = importlib.util.find_spec("triton")
    if spec is None:
        return None
    try:
        from triton import knobs

        path = getattr(knobs.nvidia, name.replace("-", "_")).path
        if path and os.path.isfile(path):
            return path
    except Exception:  # an older Triton without knobs, or no knob for this tool
        pass
    path = os.path.join(os.path.dirname(spec.origin or ""), "backends", "nvidia", "bin", name)
    return path if os.path.isfile(path) else None


def find_tool(name: str, prefer_triton: bool = False) -> str | None:
    """A CUDA binary tool (nvcc, cuobjdump, ptxas, nvdisasm, compute-sanitizer), or None.

    Triton's copy first when asked (it matches the ptxas Triton compiles with), else the toolkit first."""
    order = (_from_triton, _from_toolkit) if prefer_triton else (_from_toolkit, _from_triton)
    return next((p for p in (f(name) for f in order) if p), None)


def find_nvcc() -> str | None:
    return find_tool("nvcc")


def sanitizer() -> str | None:
    return find_tool("compute-sanitizer")


def tool_available(name: str) -> bool:
    return find_tool(name) is not None
