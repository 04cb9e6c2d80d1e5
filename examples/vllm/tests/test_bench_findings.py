"""The peers' findings (known_defects.toml, [[bench]]): `python -m harness bench` checks each peer at the cpu tier's
cases before it times it, and a peer that fails is a finding, not a failure of the run. Here every record of a peer
that was not timed must be a recorded finding, with its message, and every recorded finding must still be found.

One bench run, at the dtypes and peers the findings name plus bf16 (the default), about 15 s on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plugin.known_defects import read

ROOT = Path(__file__).resolve().parents[1]
KNOWN = read(ROOT / "known_defects.toml")  # its [[bench]] and [[matrix]]: this project's own tables
FINDINGS = KNOWN.get("bench", [])
KERNELS = sorted({"per_token_group_quant_fp8", "rms_norm_gated"} | {f["kernel"] for f in FINDINGS})
PEERS = sorted({"vllm_test_native", "vllm_native"} | {f["provider"] for f in FINDINGS})
DTYPES = sorted({"bf16"} | {f["dtype"] for f in FINDINGS})


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "harness", "bench", "--kernel", ",".join(KERNELS), "--provider",
                           ",".join(PEERS), "--dtype", ",".join(DTYPES), "--timeout", "1", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    return {"interpreted": results["environment"]["arch"] == "cpu",  # exact messages are the CPU run's
            "by_key": {(c["kernel"], c["provider"], c["dtype"], c["case_id"]): c
                       for c in results["cases"] if c["role"] == "peer"}}


def _key(f: dict) -> tuple:
    return f["kernel"], f["provider"], f["dtype"], f["case"]


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f["id"])
def test_the_finding_is_still_found_with_its_message(records, finding):
    record = records["by_key"].get(_key(finding))
    assert record is not None, f"{finding['id']}: bench made no record of {_key(finding)}"
    assert record["status"] != "ok", f"{finding['id']} is no longer found: the peer passed its check and was timed"
    assert re.search(finding["match"], record["reason"]), f"{finding['id']}: {record['reason']}"
    if records["interpreted"]:
        assert record["reason"] == finding["exact"]


def test_every_peer_that_was_not_timed_is_a_recorded_finding(records):
    recorded = {_key(f) for f in FINDINGS}
    new = [f"{k}: {r['status']}: {r['reason']}" for k, r in records["by_key"].items()
           if r["status"] != "ok" and k not in recorded]
    assert not new, "peer findings not in known_defects.toml:\n" + "\n".join(new)
    assert any(r["status"] == "ok" for r in records["by_key"].values()), "no peer was timed at all"
