"""Planted kernels: deliberately broken, to prove the harness catches each bug."""
