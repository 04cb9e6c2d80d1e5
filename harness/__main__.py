"""``python -m harness``: the command line."""

from harness.cli.main import main

raise SystemExit(main())
