"""The plugin's per-session state: one stash key holding the parsed options, the specs seen and the outcomes."""

from __future__ import annotations

import pytest

KEY = pytest.StashKey[dict]()
