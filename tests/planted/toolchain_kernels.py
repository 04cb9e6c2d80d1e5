"""Planted kernels for tests/test_toolchains_matrix.py, each using a real API difference between Triton releases:

- unsqueeze_copy: ``tl.unsqueeze``, which Triton added in 3.7: a compile error under 3.6 and before, clean after.
- advance_copy: ``tl.make_block_ptr`` and ``tl.advance``: clean under 3.8 and before; 3.9 removed block
  pointers ("Block pointers have been removed in favor of the tensor descriptor API"), a compile error there
  (the direction a user who upgrades meets).
- loop_copy: a loop to a runtime bound, which the interpreters of 3.5 and 3.6 cannot run under NumPy 2 (their
  scalar tensor's ``__index__``); harness/interpreter/indexing.py corrects it.
All copy their input; launchers follow the harness calling convention.
"""

import triton
import triton.language as tl

BLOCK = 256


@triton.jit
def unsqueeze_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row = tl.unsqueeze(tl.load(x_ptr + offs, mask=mask), 0)  # [1, BLOCK]
    tl.store(out_ptr + offs[None, :], row, mask=mask[None, :])


def unsqueeze_copy(*, x, out):
    n = x.numel()
    if n:
        unsqueeze_copy_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)


@triton.jit
def advance_copy_kernel(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr + row * cols, shape=(cols,), strides=(1,), offsets=(0,), block_shape=(BLOCK,),
                            order=(0,))
    dst = tl.make_block_ptr(out_ptr + row * cols, shape=(cols,), strides=(1,), offsets=(0,), block_shape=(BLOCK,),
                            order=(0,))
    for _ in range(0, tl.cdiv(cols, BLOCK)):
        tl.store(dst, tl.load(src, boundary_check=(0,)), boundary_check=(0,))
        src = tl.advance(src, (BLOCK,))
        dst = tl.advance(dst, (BLOCK,))


def advance_copy(*, x, out):
    rows, cols = x.shape
    if x.numel():
        advance_copy_kernel[(rows,)](x, out, rows, cols, BLOCK=BLOCK)


def copy_ref(*, x, out):
    out.copy_(x)


@triton.jit
def loop_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):  # a runtime bound: the interpreter turns `n` into a Python int
        offs = start + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def loop_copy(*, x, out):
    loop_copy_kernel[(1,)](x, out, x.numel(), BLOCK=BLOCK)
