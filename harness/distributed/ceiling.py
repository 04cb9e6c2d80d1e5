"""The ceiling a collective is judged against: the bus bandwidth of the machine's own all-reduce (NCCL's on
GPUs, gloo's on a CPU), measured on the group of ranks that runs the cases.

Bus bandwidth is nccl-tests' figure: an all-reduce of B bytes over w ranks moves 2 (w - 1) / w * B bytes
through each rank's link whatever the algorithm, so ``busbw = 2 (w - 1) / w * B / t`` compares across world
sizes. The link saturates only on large messages, so the ceiling is the best over a few sizes; a spec gives its
bus bytes as ``[roofline] bytes`` (an all-reduce's ``2 * (world - 1) / world * bytes_x``), and a decode-sized
message then reads as latency-bound, far under the ceiling, as a roofline should say. Each sample is the slowest
rank's, after a barrier, as the cases' own are. Cached as JSON per device, backend, world size, torch version
and sizes, beside the machine's other ceilings; ``refresh`` measures again.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
from dataclasses import dataclass

# Message sizes in bytes (fp32 buffers of zeros: a sum that stays finite however often it runs)
SIZES = {"gpu": (1 << 20, 16 << 20, 256 << 20), "cpu": (1 << 16, 1 << 20, 8 << 20)}
MIN_TIME_S = 0.2


@dataclass(frozen=True)
class BusCeiling:
    device: str
    backend: str
    world: int
    busbw_gbps: float                 # the best over the sizes
    at_bytes: int                     # the message size that reached it
    per_size: tuple                   # ((bytes, median seconds, busbw GB/s), ...)
    measured_at: str
    cached: bool = False

    @property
    def line(self) -> str:
        return (f"all_reduce bus bandwidth over {self.world} {self.backend} ranks: {self.busbw_gbps:,.1f} GB/s at "
                f"{self.at_bytes / 2**20:g} MiB{' (cached)' if self.cached else ''}")


def bus_factor(world: int) -> float:
    """Bytes through each rank's link per byte all-reduced."""
    return 2.0 * (world - 1) / world


def busbw_task(device: str, sizes: list[int], min_time_s: float, rank: int) -> list[tuple[int, float]]:
    """On every rank: (bytes, median seconds of the slowest rank) of ``dist.all_reduce`` at each size."""
    import torch
    import torch.distributed as dist

    from harness.distributed.tasks import _device, slowest_samples

    dev = _device(device, rank)
    out = []
    for nbytes in sizes:
        buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=dev)
        samples = slowest_samples(lambda b=buf: dist.all_reduce(b), dev, min_time_s, 5, 500)
        out.append((nbytes, statistics.median(samples)))
        del buf
    return out


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(0)
    from harness.timing.environment import cpu_model

    return cpu_model()


def bus_ceiling(group, *, cache_dir=None, refresh: bool = False, timeout_s: float = 300.0) -> BusCeiling:
    """The measured (or cached) all-reduce bus bandwidth of ``group``'s ranks. Raises RuntimeError with the
    group's one-line reason when the measurement fails."""
    import torch

    from harness.distributed.group import backend_for
    from harness.timing.ceilings import cache_path

    kind = "gpu" if group.device.startswith("cuda") else "cpu"
    key = {"device": _device_name(group.device), "backend": backend_for(group.device), "world": group.world,
           "torch": torch.__version__, "sizes": list(SIZES[kind])}
    path = cache_path(cache_dir, key, f"bus-w{group.world}")
    if not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("key") == key:
                return BusCeiling(**{**data["ceiling"], "per_size": tuple(map(tuple, data["ceiling"]["per_size"])),
                                     "cached": True})
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable or another schema: measure again
    outcome = group.run("harness.distributed.ceiling:busbw_task",
                        {"device": group.device, "sizes": list(SIZES[kind]), "min_time_s": MIN_TIME_S}, timeout_s)
    if outcome.status != "ok":
        raise RuntimeError(f"measuring the all_reduce bus bandwidth: {outcome.summary}")
    factor = bus_factor(group.world)
    per_size = tuple((b, t, factor * b / t / 1e9) for b, t in outcome.values[0])
    best = max(per_size, key=lambda row: row[2])
    ceiling = BusCeiling(key["device"], key["backend"], group.world, best[2], best[0], per_size,
                         datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"key": key, "ceiling": {k: v for k, v in dataclasses.asdict(ceiling).items() if k != "cached"}}
    path.write_text(json.dumps(data, indent=2))
    return ceiling

