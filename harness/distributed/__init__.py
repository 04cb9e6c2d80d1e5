"""Kernels that span processes: a group of rank processes under torch.distributed (gloo on the CPU, NCCL on
GPUs), the per-rank checks and the slowest-rank timing that run in it."""
