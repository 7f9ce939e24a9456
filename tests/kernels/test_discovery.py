"""kernels/__init__.py registers a kernel by its names alone: `<name>_numba` beside
`<name>_numpy` in a module of minitensor/kernels/ becomes `kernels.<name>` (issue 21: adding an
op with a kernel pair is the op's file plus its test, no list to extend)."""

import importlib
import pkgutil
import sys
import types

import numpy as np
import pytest

import minitensor as mt
from minitensor import kernels as K


def _module(name, **functions):
    module = types.ModuleType(f"minitensor.kernels.{name}")
    for attr, fn in functions.items():
        fn.__module__ = module.__name__
        setattr(module, attr, fn)
    return module


def test_a_pair_in_a_module_is_found_and_follows_the_switch():
    def double_numpy(x):
        return x * 2

    def double_numba(x):
        return np.multiply(x, 2)

    def helper_numpy(x):  # no kernel beside it: a plain helper, not a kernel
        return x

    module = _module(
        "doubling", double_numpy=double_numpy, double_numba=double_numba, helper_numpy=helper_numpy
    )
    ((numba_fn, numpy_fn),) = K._pairs(module)
    assert (numba_fn, numpy_fn) == (double_numba, double_numpy)
    kernel = K.dispatch(numba_fn, numpy_fn)
    assert kernel.__name__ == "double" and kernel.numpy is double_numpy
    with mt.kernels.use_backend("numpy"):
        assert kernel(np.ones(2)).tolist() == [2.0, 2.0]


def test_a_kernel_without_its_twin_is_refused_by_name():
    def lonely_numba(x):
        return x

    with pytest.raises(
        ImportError, match=r"kernels/orphans\.py: lonely_numba has no plain-numpy twin"
    ):
        K._pairs(_module("orphans", lonely_numba=lonely_numba))


def test_an_imported_twin_is_not_registered_twice():
    # (import_module: the attribute `kernels.erf` is the kernel, the module is sys.modules')
    erf = importlib.import_module("minitensor.kernels.erf")
    bias_activation = importlib.import_module("minitensor.kernels.bias_activation")
    assert erf.erf_numpy in [twin for _, twin in K._pairs(erf)]
    assert erf.erf_numpy not in [twin for _, twin in K._pairs(bias_activation)]


def test_every_pair_of_the_package_is_a_public_kernel():
    """What the convention promises, read off the files: each `<name>_numba`/`<name>_numpy`
    defined in a family module is `kernels.<name>`, listed in KERNELS and __all__."""
    expected = set()
    for info in pkgutil.iter_modules(K.__path__):
        if info.ispkg or info.name in K._PLUMBING:
            continue
        module = importlib.import_module(f"minitensor.kernels.{info.name}")
        for attr, fn in vars(module).items():
            base = attr.removesuffix("_numpy")
            if (
                base != attr
                and hasattr(module, f"{base}_numba")
                and fn.__module__ == module.__name__
            ):
                expected.add(base)
    names = {k.__name__ for k in K.KERNELS}
    assert names == expected
    assert {"matmul", "softmax_forward", "fused_attention_backward", "erf"} <= names
    for name in names:
        assert getattr(K, name).numpy.__name__ == f"{name}_numpy"
        assert name in K.__all__


def test_discovery_does_not_load_numba():
    """The plumbing that imports numba is skipped: a fresh `import minitensor` keeps it out."""
    import subprocess

    code = "import sys, minitensor; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
