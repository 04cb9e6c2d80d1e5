import pytest

pytest_plugins = ["pytester"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # The tests marked slow first, longest-first scheduling in effect: pytest-xdist hands items out in collection
    # order, and most slow tests sit late in it (test_scaffold, test_sharding, test_spec_*, test_toolchains_*), so
    # one of them drawn last kept a worker busy while the other idled. The sort is stable: the rest keep their order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def on_device():
    """The test's tensors on the GPU where there is one (the kernels compiled), else on the CPU (the interpreter):
    torch's default device for the test, which its generators take too (tests/e2e.py's ``seeded``: a CUDA default
    device takes no CPU generator). Yields the device's name."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        yield device
