"""The merge gate: a base and a pull request timed on one GPU, interleaved, with a calibrated verdict.

- verdict.py: pure logic on samples: the ratio of medians (PR / base) with a block-bootstrap interval, the
  minimum effect, the verdict (FASTER, SLOWER, SAME, INCONCLUSIVE) and the exit code;
- calibration.py: where the minimum effect comes from (policy, calibration file, spec, A/A noise file);
- interleave.py: timing the two sides' callables in alternating blocks on one device;
- basetree.py: a git ref's kernels and specs under their own module root, importable beside the PR's;
- ab.py: ``bench --against REF``: both sides in one process, case by case;
- compare.py: two stored results files compared, with the refusals that keep that honest;
- model.py: the frozen records all of these produce and the report renders.
"""
