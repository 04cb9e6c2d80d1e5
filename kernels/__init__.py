"""Triton kernels: each module holds its kernel(s), the launcher and the plain-torch `<name>_ref`."""
