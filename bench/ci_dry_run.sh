#!/usr/bin/env bash
# Dry run of the GPU CI job without GitHub: the commands of .github/workflows/kernel-harness.yml's `plan` and `gpu`
# jobs (harness affected, the clean environment of harness/gate/sandbox.py, the install into its venv over the
# machine's packages, harness ci-gpu), minus the GitHub-only steps (authorize, checkout, artifacts, the status
# and the comment), in throwaway git repositories holding this tree:
#   clean   the pull request changes a comment in kernels/<K>.py               -> must pass (exit 0)
#   slower  the launchers of kernels/<K>.py redo the first ~10% of rows         -> must fail, SLOWER
#   wrong   the launchers of kernels/<K>.py scale their output by 1.5           -> must fail on correctness
# Each writes $OUT/ci-dry-run/<scenario>.log (and the job's report.md, ci.json, logs under <scenario>/) and
# prints its exit code; the script exits 0 only when all three came out as they must.
# Usage (GPU machine, repo root): OUT=/tmp/out bash bench/ci_dry_run.sh [clean] [slower] [wrong]
#   KERNEL=rmsnorm (default) picks the kernel; CI_GPU_EXTRA="--tier ci" is for trying the script on a CPU.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
KERNEL=${KERNEL:-rmsnorm}
src=$(pwd)
dest="$OUT/ci-dry-run"
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(clean slower wrong)
[ -f "$src/kernels/$KERNEL.py" ] || { echo "ci_dry_run: no kernels/$KERNEL.py here (run from the repo root)" >&2; exit 2; }

# The pull request's change, appended to kernels/<K>.py: every launcher the spec names is wrapped (keeping its
# signature for the spec checks), so the gate's candidate is hit whichever backend it is on this machine.
plant() {
  local what=$1 file=$2
  case "$what" in
    clean) printf '\n# ci dry run: a comment-only change\n' >> "$file" ;;
    slower|wrong) cat >> "$file" <<EOF


# ci dry run ($what): planted on purpose
def _ci_dry_run(fn):
    import functools

    @functools.wraps(fn)
    def planted(**kw):
        result = fn(**kw)
        x, out = kw.get("x"), kw.get("out")
        if "$what" == "wrong" and out is not None and out.numel():
            out.mul_(1.5)
        if "$what" == "slower" and x is not None and out is not None and x.numel():
            m = (x.shape[0] + 9) // 10  # a redundant pass over the first ~10% of rows: same values, more work
            fn(**{**kw, "x": x[:m], "out": out[:m]})
        return result
    return planted


for _name in [n for n in ("$KERNEL", "${KERNEL}_cuda") if n in globals()]:
    globals()[_name] = _ci_dry_run(globals()[_name])
EOF
    ;;
  esac
}

run_scenario() {
  local name=$1 repo="$work/$name" log="$dest/$name.log"
  mkdir -p "$repo"
  tar -C "$src" --exclude=./.git --exclude=./build --exclude=./.nox --exclude=./reports --exclude=./.snap \
    --exclude=./.whl --exclude=./out --exclude='*/__pycache__' -cf - . | tar -C "$repo" -xf -
  (
    set -e
    cd "$repo"
    g() { git -c user.name=ci-dry-run -c user.email=ci@localhost "$@"; }
    g init -q && g add -A && g commit -qm base
    plant "$name" "kernels/$KERNEL.py"
    g commit -qam "pull request ($name)"
    base=$(git rev-parse HEAD~1)
    # plan job
    python3 -m harness affected --base "$base" --github-output "$repo/.github-output"
    kernels=$(sed -n 's/^kernels=//p' "$repo/.github-output" | tail -1)
    # gpu job: the clean environment, the install step, then the gate step, as kernel-harness.yml writes them
    # ($RUNNER_TEMP -> a scratch folder; a machine's own Python may be its user's, hence --allow-writable-python)
    RUNNER_TEMP="$work/runner-$name"
    mkdir -p "$RUNNER_TEMP"
    python3 -I harness/gate/sandbox.py setup --root "$RUNNER_TEMP/kh-job" --github-env "$RUNNER_TEMP/env" \
      --allow-writable-python
    set -a && . "$RUNNER_TEMP/env" && set +a
    trap 'python3 -I "$repo/harness/gate/sandbox.py" cleanup --root "$RUNNER_TEMP/kh-job" --tag "$KH_JOB_TAG"' EXIT
    HARNESS=.
    "$KH_PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps "$HARNESS"
    # shellcheck disable=SC2086  # CI_GPU_EXTRA is a list of options, split on purpose
    "$KH_PYTHON" -m harness ci-gpu --against "$base" --kernels "$kernels" \
      --out "$dest/$name" --runner "dry-run-$name" ${CI_GPU_EXTRA:-}
  ) > "$log" 2>&1
  echo $?
}

ok=0
for name in "${scenarios[@]}"; do
  case "$name" in clean|slower|wrong) ;; *) echo "ci_dry_run: unknown scenario $name" >&2; exit 2 ;; esac
  start=$SECONDS
  rc=$(run_scenario "$name")
  verdict=$(grep -E '^ci-gpu: (PASSED|FAILED)' "$dest/$name.log" | tail -1)
  verdict=${verdict:-"ci-gpu: no decision line (see $name.log)"}
  want="fail"; [ "$name" = clean ] && want="pass"
  got="fail"; [ "$rc" = 0 ] && got="pass"
  as_expected=yes
  [ "$got" = "$want" ] || as_expected=no
  if [ "$name" = slower ] && ! grep -q '"SLOWER": [1-9]' "$dest/$name/ci.json" 2>/dev/null; then as_expected=no; fi
  if [ "$name" = wrong ] && ! grep -qE 'tests failed|wrong|error' <<< "$verdict"; then as_expected=no; fi
  [ "$as_expected" = yes ] || ok=1
  echo "$name: exit $rc (must $want; as expected: $as_expected; $((SECONDS - start)) s) $verdict" | tee -a "$dest/summary.txt"
done
exit $ok
