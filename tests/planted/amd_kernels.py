"""Planted kernels for tests/test_amd.py: a known outcome in the AMD columns of the static matrix.

- transpose: out = x.T through one 128 x 256 fp32 tile per program, loaded in x's order and stored in out's,
  so Triton converts the layout through shared memory, staging the whole tile (128 KiB): over gfx942's
  64 KiB of LDS, within gfx950's 160 KiB and every sm_80+ shared-memory limit (eight warps keep the NVIDIA
  compile from spilling). So the matrix fails on gfx942 only.
- small_transpose: the same with a 32 x 32 tile, clean on every target.
- tf32_matmul: a tf32 tl.dot inside a jit helper: a compile error on gfx950 only (no tf32 there).
Launchers follow the harness calling convention (keyword arguments, outputs passed in, return None); whole
tiles only (no masks: masked, Triton keeps this transpose in registers).
"""

import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, out_ptr, stride_x, stride_out, TILE_M: tl.constexpr, TILE_N: tl.constexpr):
    rm = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    rn = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    v = tl.load(x_ptr + rm[:, None] * stride_x + rn[None, :])
    tl.store(out_ptr + rn[:, None] * stride_out + rm[None, :], tl.trans(v))


def _launch(x, out, tile_m, tile_n):
    rows, cols = x.shape
    if rows % tile_m or cols % tile_n or x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError(f"transpose needs whole {tile_m} x {tile_n} tiles and unit-stride rows")
    transpose_kernel[(rows // tile_m, cols // tile_n)](x, out, x.stride(0), out.stride(0), TILE_M=tile_m,
                                                       TILE_N=tile_n, num_warps=8)


def transpose(*, x, out):
    _launch(x, out, 128, 256)


def small_transpose(*, x, out):
    _launch(x, out, 32, 32)


def transpose_ref(*, x, out):
    """The reference test_amd.py's specs name; the matrix compiles, it never runs one."""
    out.copy_(x.t())


@triton.jit
def _product(a, b):
    return tl.dot(a, b, input_precision="tf32")


@triton.jit
def tf32_matmul_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], _product(a, b))


def tf32_matmul(*, a, b, c):
    """One N x N fp32 tile, multiplied in tf32: gfx950 has no tf32 (Triton's HIP backend allows it on gfx942
    only), so this fails to compile there and nowhere else, and the error is raised inside a jit helper."""
    tf32_matmul_kernel[(1,)](a, b, c, N=a.shape[0])


@triton.jit
def ptx_halves_kernel(x_ptr, out_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    # a 16-bit register ("h") in an inline-asm constraint: NVIDIA's PTX has the class, AMDGPU's LLVM backend
    # has none and says so on stderr only, still emitting code
    y = tl.inline_asm_elementwise("mov.b16 $0, $1;", "=h,h", [x], dtype=tl.int16, is_pure=True, pack=1)
    tl.store(out_ptr + r, y)


def ptx_halves(*, x, out):
    """A copy through PTX inline asm: compiles for NVIDIA; for AMD the compiler only prints an LLVM error."""
    ptx_halves_kernel[(1,)](x, out, N=x.shape[0])
