#!/usr/bin/env bash
# The red-team suite as one command: every hostile pull request in tests/redteam (the policy and timing attacks,
# test_policy_*.py, and the dispatch attacks, test_dispatch_*.py) played against the trusted pipeline. On a CPU
# the gate times with the host clock; on a GPU machine the same tests time CUDA events on the GPU, and the
# GPU-only variants (skipped on a CPU, with the reason) run too.
# Writes OUT_DIR/redteam.log (pytest -v with every test's output), OUT_DIR/redteam.xml (JUnit) and
# OUT_DIR/summary.txt: one line per attack (caught / no effect, as the test printed it, or FAILED / skipped
# with why; a passing test that prints no attack line is a control), then a count. Exits with pytest's code: 0 only when every attack was caught or had no effect.
# Needs no nox and no network: the harness of this checkout is installed into python3 when it is not already
# (pip install --no-build-isolation --no-deps -e .: the machine's torch and triton are used, never replaced).
# Usage (repo root): bash bench/redteam.sh OUT_DIR [more pytest options, e.g. -k cached]
#   PYTHON=python3 (default) picks the interpreter.
set -uo pipefail
out=${1:?usage: bash bench/redteam.sh OUT_DIR [pytest options]}
shift
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
[ -d tests/redteam ] || { echo "redteam: no tests/redteam here: run from the repository root" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)

here=$(pwd)
# From another folder, so that this one on sys.path does not count as installed.
if ! (cd / && "$PYTHON" - "$here" 2>/dev/null) <<'EOF'
import os, sys
import harness
sys.exit(0 if os.path.realpath(harness.__file__).startswith(os.path.realpath(sys.argv[1]) + os.sep) else 1)
EOF
then
  echo "redteam: installing this checkout's harness into $PYTHON (no dependencies)"
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
    > "$out/install.log" 2>&1 || { echo "redteam: the install failed: $out/install.log" >&2; exit 2; }
fi
device=$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU")')
start=$SECONDS
"$PYTHON" -m pytest tests/redteam -v -rA -p no:cacheprovider --junitxml="$out/redteam.xml" \
  -o junit_logging=system-out -o junit_family=xunit2 "$@" > "$out/redteam.log" 2>&1
rc=$?
"$PYTHON" - "$out/redteam.xml" "$device" "$rc" "$((SECONDS - start))" > "$out/summary.txt" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from collections import Counter

path, device, rc, seconds = sys.argv[1:5]
try:
    cases = list(ET.parse(path).getroot().iter("testcase"))
except (OSError, ET.ParseError) as exc:
    print(f"redteam on {device}: no results ({type(exc).__name__}: {exc}); pytest exit {rc}")
    sys.exit()
n = Counter()
for tc in cases:
    test = f"{tc.get('classname', '').rpartition('.')[2]}::{tc.get('name')}"
    said = [ln[len("REDTEAM "):] for e in tc.iter("system-out") for ln in (e.text or "").splitlines()
            if ln.startswith("REDTEAM ")]
    bad = next((e for e in tc if e.tag in ("failure", "error")), None)
    skipped = next((e for e in tc if e.tag == "skipped"), None)
    if bad is not None:
        n["FAILED"] += 1
        first = (bad.get("message") or bad.text or "").strip().splitlines()
        print(f"FAILED {test}: {first[0][:300] if first else bad.tag}")
    elif skipped is not None:
        n["skipped"] += 1
        print(f"skipped {test}: {(skipped.get('message') or '').strip()[:300]}")
    elif not said:  # a control (the attack working where the defence is absent) or a check of the setup
        n["control"] += 1
        print(f"passed {test}: a control, no attack line")
    else:
        for line in said:
            n["caught" if ": caught:" in line else "no effect" if ": no effect:" in line else "unlabelled"] += 1
            print(f"{line[:400]}  [{test}]")
print(f"redteam on {device}: {n['caught']} caught, {n['no effect']} no effect, {n['FAILED']} failed, "
      f"{n['skipped']} skipped, {n['control']} controls ({len(cases)} tests, {seconds} s, pytest exit {rc})")
EOF
cat "$out/summary.txt"
exit "$rc"
