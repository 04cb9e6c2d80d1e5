"""The real gate path on a CPU (``bench --against HEAD`` on a throwaway repository, as tests/test_gate_ab.py):
a launcher that adds host work, a Python busy-loop of 60 us per call, is judged SLOWER on its host-time row and
fails the gate."""

from __future__ import annotations

import json

from tests.test_gate_ab import TINY, _against, tiny_repo  # noqa: F401  (tiny_repo is a fixture)

BUSY = '''

def _busy(us):
    import time
    t = time.perf_counter()
    while time.perf_counter() - t < us * 1e-6:
        pass
'''


def test_a_launcher_with_added_host_work_is_slower(tiny_repo, tmp_path):  # noqa: F811
    slowed = TINY.replace("    out.copy_(x * w * FACTOR)\n", "    _busy(60.0)\n    out.copy_(x * w * FACTOR)\n")
    assert slowed != TINY
    (tiny_repo / "kernels" / "tiny.py").write_text(slowed + BUSY)
    out = tmp_path / "slow-launcher"
    done = _against(tiny_repo, out, "--provider", "fast")
    assert done.returncode == 1, done.stderr[-3000:]
    doc = json.loads((out / "compare.json").read_text())
    rows = {c["metric"]: c for c in doc["comparison"]["cases"]}
    host = rows["host"]
    assert host["verdict"] == "SLOWER" and host["pr_median_us"] - host["base_median_us"] > 40.0
    assert host["threshold"]["relative"] == 0.10  # the host rule, not the spec's device min_effect of 0.9
    md = (out / "compare.md").read_text()
    assert "host µs/call" in md and "Host time per call" in md
