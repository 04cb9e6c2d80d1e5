"""The merge gate: a base and a pull request timed on one GPU, interleaved, with a calibrated verdict.

- verdict.py: pure logic on samples: the ratio of medians (PR / base) with a block-bootstrap interval, the
  minimum effect, the verdict (FASTER, SLOWER, SAME, INCONCLUSIVE) and the exit code;
- calibration.py: where the minimum effect comes from (policy, calibration file, spec, A/A noise file);
- interleave.py: timing the two sides' callables in alternating blocks on one device;
- basetree.py: a git ref's kernels and specs under their own module root, importable beside the PR's;
- ab.py / abcase.py: ``bench --against REF``: both sides checked and timed, case by case, in worker processes;
- policy.py: policy from the base: the pull request's changes of policy-carrying spec fields, their acceptance;
- integrity.py: the tripwire on the harness's timing and checking code in the process that times;
- scan.py: the static scan of the pull request's kernel modules (ast, no import);
- compare.py: two stored results files compared, with the refusals that keep that honest;
- ci.py: the merge policy and ``ci-gpu``'s steps on a GPU runner; candidate.py: the pull request's spec and kernel
  folders from its head commit, for the full-tier tests;
- authorize.py: who may run the GPU jobs and accept a regression or a policy change, from the event and the API's
  answers, tied to the head SHA; github.py: those API calls;
- status.py / comment.py: the verdict re-decided from validated ci.json files, the commit status and the sticky
  comment (one fixed template, untrusted values neutralised);
- sandbox.py: a clean environment per job on a self-hosted runner (standard library only: it runs before install);
- model.py: the frozen records all of these produce and the report renders.
"""
