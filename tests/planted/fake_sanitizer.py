"""A stand-in for compute-sanitizer, so the CPU tests drive ``python -m harness sanitize`` end to end.

Called as ``compute-sanitizer --tool T --error-exitcode N --target-processes all CMD...``, it runs CMD and
then behaves as FAKE_SANITIZER says: ``clean`` (default), ``errors`` (a memcheck finding, exit N), ``hazards``
(a racecheck finding, exit N) or ``hang`` (never returns; its pid goes to FAKE_SANITIZER_PIDFILE first).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    opts, cmd = {}, list(argv)
    while cmd and cmd[0].startswith("--"):
        opts[cmd[0]] = cmd[1]
        cmd = cmd[2:]
    mode = os.environ.get("FAKE_SANITIZER", "clean")
    print(f"========= COMPUTE-SANITIZER (fake) tool={opts['--tool']} "
          f"caching={os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING', 'on')}", flush=True)
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(os.environ["FAKE_SANITIZER_PIDFILE"], "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(600)
    code = subprocess.run(cmd).returncode
    if mode == "errors":
        print("========= Invalid __global__ read of size 2 bytes\n"
              "=========     at _overread_kernel+0x1f0\n"
              "=========     Address 0x7f0000001000 is out of bounds\n"
              "========= ERROR SUMMARY: 1 error", flush=True)
        return int(opts["--error-exitcode"])
    if mode == "hazards":
        print("========= Error: Race reported between Write access at racy_scale_kernel+0x80\n"
              "=========     and Read access at racy_scale_kernel+0x120 [128 hazards]\n"
              "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)", flush=True)
        return int(opts["--error-exitcode"])
    print("========= ERROR SUMMARY: 0 errors", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
