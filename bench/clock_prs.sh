#!/usr/bin/env bash
# The two pull requests that fooled the clock (issue: kernels that fool the clock), played against the gate on a
# GPU. Each changes only kernels/rmsnorm.py's launcher: `replay` returns at once when called again with the same
# buffers; `side_stream` runs the kernel on a stream of its own without making the caller's stream wait. First
# an A/A run of the unchanged tree (the gate must pass it), then each PR: `bench --against HEAD` (must exit 1
# with WRONG) and the PR's generated ci-tier tests (must fail, each with the check that caught it).
# Usage (repo root, harness installed): bash bench/clock_prs.sh OUT_DIR
set -uo pipefail
out=${1:?usage: bench/clock_prs.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A throwaway repository holding this tree as its base commit: the gate takes the base from git.
tar --exclude=.git --exclude=.nox --exclude=build -cf - . | (mkdir -p "$work/repo" && cd "$work/repo" && tar -xf -)
cd "$work/repo"
export GIT_AUTHOR_NAME=kh GIT_AUTHOR_EMAIL=kh@localhost GIT_COMMITTER_NAME=kh GIT_COMMITTER_EMAIL=kh@localhost
git init -q && git add -A && git commit -qm base
export PYTHONPATH="$work/repo${PYTHONPATH:+:$PYTHONPATH}"

gate() {  # NAME: bench --against HEAD on rmsnorm, its log and exit code
  python3 -m harness bench --against HEAD --kernel rmsnorm --out "$out/gate-$1" > "$out/gate-$1.log" 2>&1
  echo "exit code: $?" >> "$out/gate-$1.log"
  echo "== gate $1: $(grep -E '^merge gate|^exit code' "$out/gate-$1.log" | tr '\n' ' ')"
  grep -E '^(WRONG|SLOWER|ERROR):' "$out/gate-$1.log" | head -4
}

gate aa
for pr in replay side_stream; do
  git checkout -q -- kernels/rmsnorm.py
  python3 - "$pr" <<'PY'
import sys
pr = sys.argv[1]
path = "kernels/rmsnorm.py"
src = open(path).read()
if pr == "replay":
    src += '''

_launch_rmsnorm, _LAST = rmsnorm, {}


def rmsnorm(*, x, weight, out, eps):
    """The PR: skip the work when called again with the same buffers (the result is 'already there')."""
    key = (x.data_ptr(), weight.data_ptr(), out.data_ptr(), tuple(x.shape), eps)
    if _LAST.get("key") == key:
        return
    _LAST["key"] = key
    _launch_rmsnorm(x=x, weight=weight, out=out, eps=eps)
'''
else:
    src += '''

_launch_rmsnorm, _STREAMS = rmsnorm, {}


def rmsnorm(*, x, weight, out, eps):
    """The PR: launch on a stream of its own, never joined back to the caller's stream."""
    stream = _STREAMS.setdefault(x.device, torch.cuda.Stream(device=x.device))
    with torch.cuda.stream(stream):
        _launch_rmsnorm(x=x, weight=weight, out=out, eps=eps)
'''
open(path, "w").write(src)
PY
  gate "$pr"
  python3 -m pytest specs/rmsnorm.toml --backend triton -q -rf -p no:cacheprovider > "$out/tests-$pr.log" 2>&1
  echo "exit code: $?" >> "$out/tests-$pr.log"
  echo "== tests $pr: $(tail -2 "$out/tests-$pr.log" | tr '\n' ' ')"
  grep -oE '^FAILED [^ ]+ - [a-z_ -]+:' "$out/tests-$pr.log" | awk '{print $NF}' | sort | uniq -c
done
