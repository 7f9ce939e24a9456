"""Fixtures of the kernel tests."""

import pytest

from minitensor.kernels.fast_matmul import products


@pytest.fixture(autouse=True)
def _routes_decided_anew():
    """Every test decides the products' routes anew, and leaves none behind: a route remembered
    while another test's fake `fastest`, GEMM table or timings stood in must not answer this
    one's products (products._choose remembers a route per layout; the timings stay)."""
    products._forget_routes()
    yield
    products._forget_routes()
