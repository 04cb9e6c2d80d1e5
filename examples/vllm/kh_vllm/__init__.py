"""kernel-harness adopted on vLLM's pure-Triton kernels, vendored: the kernels and launchers as vLLM has them,
vLLM's own torch paths, adapters onto the harness's calling convention and plain-torch references."""
