"""What a failing generated test prints: a crashing candidate's traceback trimmed to the kernel's own frames
(whole with --tb=long), and on every failure the one command that reproduces it (node id and seed)."""

from __future__ import annotations

from tests.e2e import REPO, write_spec

CASE = "rows=16,cols=128"


def _run(pytester, monkeypatch, impl: str, *extra: str) -> str:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("COLUMNS", "300")
    specs = pytester.path / "specs"
    specs.mkdir()
    write_spec(specs, "scale", impl)
    node = f"specs/scale.toml::scale[triton-fp32-{CASE}]"
    result = pytester.runpytest_subprocess("--specs", "specs", "--no-isolate", "-p", "no:cacheprovider", node,
                                           *extra, timeout=120)
    return result.stdout.str()


def test_a_crash_shows_the_kernels_frames_and_the_command_that_reproduces_it(pytester, monkeypatch):
    out = _run(pytester, monkeypatch, "tests.planted.faulty_kernels:raises", "--seed", "7")
    assert "RuntimeError: planted failure: the launcher rejects every shape" in out
    assert "traceback, the kernel's frames (--tb=long for all):" in out
    assert "faulty_kernels.py" in out and "in raises" in out
    assert "harness/correctness/checks.py" not in out  # the harness's own frames are trimmed
    assert f"reproduce: python -m pytest 'specs/scale.toml::scale[triton-fp32-{CASE}]' --seed 7" in out


def test_tb_long_brings_the_whole_traceback_back(pytester, monkeypatch):
    out = _run(pytester, monkeypatch, "tests.planted.faulty_kernels:raises", "--tb=long")
    assert "harness/correctness/checks.py" in out and "faulty_kernels.py" in out


def test_a_failing_check_names_the_command_too(pytester, monkeypatch):
    out = _run(pytester, monkeypatch, "tests.planted.broken_kernels:scale_sloppy")
    assert "numerics: out:" in out
    assert f"reproduce: python -m pytest 'specs/scale.toml::scale[triton-fp32-{CASE}]'" in out
