"""A kernel module whose import needs a package that is not installed (validate must blame the environment)."""

import kh_no_such_package  # noqa: F401


def quant_ref(*, x, q, scale):
    raise AssertionError("never called")
