"""int4 weights dequantised from 32-bit words, shared by the tile kernel (kernels/int4_matmul.py) and the decode
GEMV (kernels/int4_gemv.py): one home for the bit trick and for its interpreter stand-in.

A word of w holds eight 4-bit values (nibble i, bits 4i .. 4i + 3, is k = 8u + i). On a GPU they are dequantised
two at a time in packed 16-bit registers, as Marlin does (``WORD_ASM``); under the interpreter, which runs no PTX,
the same values are computed in fp32 and rounded to the activations' type as the PTX rounds them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.common import round_to_bf16


@triton.jit
def round_to(x, IS_BF16: tl.constexpr):
    """fp32 x rounded to the nearest bf16 (or fp16) value, kept in fp32: the interpreter's stand-in for a cast."""
    if IS_BF16:
        return round_to_bf16(x)
    return x.to(tl.float16).to(tl.float32)


# Eight values of one 32-bit word of w (bytes 4u .. 4u + 3 of a row, little-endian: nibble i, bits 4i .. 4i + 3,
# holds k = 8u + i) dequantised two at a time in packed 16-bit registers, as Marlin does: lop3 puts nibbles i and
# i + 4 under the exponent of 2**E, one fma subtracts 2**E + z (exact), one fma multiplies by the scale (the one
# rounding; + -0.0 keeps the product).
# $0..$7: the values of k = 8u + 0..7; $8: the word; $9: the scale; $10: -(2**E + z). {MAGIC}/{ONE}: 2**E and 1.0
# twice, in the activations' type.
WORD_ASM = """{
.reg .b32 s2, z2, one, nz, magic, x, t;
mov.b32 s2, {$9, $9};
mov.b32 z2, {$10, $10};
mov.b32 one, ONE;
mov.b32 nz, 0x80008000;
mov.b32 magic, MAGIC;
lop3.b32 x, $8, 0x000F000F, magic, 0xEA;
fma.rn.TYPE x, x, one, z2;
fma.rn.TYPE x, x, s2, nz;
mov.b32 {$0, $4}, x;
shr.u32 t, $8, 4;
lop3.b32 x, t, 0x000F000F, magic, 0xEA;
fma.rn.TYPE x, x, one, z2;
fma.rn.TYPE x, x, s2, nz;
mov.b32 {$1, $5}, x;
shr.u32 t, $8, 8;
lop3.b32 x, t, 0x000F000F, magic, 0xEA;
fma.rn.TYPE x, x, one, z2;
fma.rn.TYPE x, x, s2, nz;
mov.b32 {$2, $6}, x;
shr.u32 t, $8, 12;
lop3.b32 x, t, 0x000F000F, magic, 0xEA;
fma.rn.TYPE x, x, one, z2;
fma.rn.TYPE x, x, s2, nz;
mov.b32 {$3, $7}, x;
}"""
WORD_ASM_BF16 = tl.constexpr(
    WORD_ASM.replace("TYPE", "bf16x2").replace("ONE", "0x3F803F80").replace("MAGIC", "0x43004300")
)
WORD_ASM_FP16 = tl.constexpr(
    WORD_ASM.replace("TYPE", "f16x2").replace("ONE", "0x3C003C00").replace("MAGIC", "0x64006400")
)



@triton.jit
def word_values(b, s, z, IS_BF16: tl.constexpr, EMULATE: tl.constexpr):
    """The eight values (q - z) * s of each word of ``b`` (int32), rounded once to the activations' type: tile i
    holds k = 8u + i. ``s`` (the scale, in the activations' type) and ``z`` (the zero point, uint8) have b's shape.
    ``EMULATE`` (the interpreter): the same values, computed in fp32 and kept in fp32."""
    if EMULATE:
        sf = s.to(tl.float32)
        zf = z.to(tl.float32)
        w0 = round_to(((b & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w1 = round_to((((b >> 4) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w2 = round_to((((b >> 8) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w3 = round_to((((b >> 12) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w4 = round_to((((b >> 16) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w5 = round_to((((b >> 20) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w6 = round_to((((b >> 24) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
        w7 = round_to((((b >> 28) & 0xF).to(tl.float32) - zf) * sf, IS_BF16)
    elif IS_BF16:
        nz = -(z.to(tl.bfloat16) + 128.0)
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            WORD_ASM_BF16,
            "=h,=h,=h,=h,=h,=h,=h,=h,r,h,h",
            [b, s, nz],
            dtype=(tl.bfloat16,) * 8,
            is_pure=True,
            pack=1,
        )
    else:
        nz = -(z.to(tl.float16) + 1024.0)
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            WORD_ASM_FP16,
            "=h,=h,=h,=h,=h,=h,=h,=h,r,h,h",
            [b, s, nz],
            dtype=(tl.float16,) * 8,
            is_pure=True,
            pack=1,
        )
    return w0, w1, w2, w3, w4, w5, w6, w7
