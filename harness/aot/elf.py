"""The size of a compiled kernel's machine code, read from its ELF binary (a CUDA cubin or an AMD hsaco).

Both vendors' binaries are ELF64 objects whose instructions sit in executable sections (``.text.<kernel>`` in a
cubin, ``.text`` in an hsaco). The code size is the sum of those sections' sizes: the instructions alone,
without the metadata, relocations and symbol tables around them, so it moves only when the generated code does.
"""

from __future__ import annotations

import struct

_SHF_EXECINSTR = 0x4
_ELF64_HEADER = struct.Struct("<16xHHIQQQIHHHHHH")  # after e_ident: type .. shstrndx, little-endian
_SECTION = struct.Struct("<IIQQQQIIQQ")             # name, type, flags, addr, offset, size, link, info, align, entsize


def code_bytes(binary: bytes | None) -> int | None:
    """Bytes of machine code in an ELF64 little-endian binary; None for anything else (or a truncated one)."""
    if not isinstance(binary, (bytes, bytearray)) or binary[:4] != b"\x7fELF" or len(binary) < 64:
        return None
    if binary[4] != 2 or binary[5] != 1:  # ELFCLASS64, ELFDATA2LSB: what nvcc, ptxas and LLVM's AMDGPU emit
        return None
    fields = _ELF64_HEADER.unpack_from(binary, 0)
    shoff, shentsize, shnum = fields[5], fields[10], fields[11]
    if shentsize < _SECTION.size or shoff + shnum * shentsize > len(binary):
        return None
    total = 0
    for i in range(shnum):
        section = _SECTION.unpack_from(binary, shoff + i * shentsize)
        if section[2] & _SHF_EXECINSTR:
            total += section[5]
    return total
