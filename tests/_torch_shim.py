"""Load one PyTorch source file twice: with the real torch, and with `torch`, `torch.nn`,
`torch.nn.functional`, `torch.optim`, `torch.utils.data`, `torch.cuda` (…) bound to
minitensor's modules — the "only the imports changed" port, done without editing the file.
Used by test_pytorch_style.py, test_annotated_transformer.py and the other port tests."""

import pathlib
import sys
import types

import numpy as np

import minitensor as mt

HERE = pathlib.Path(__file__).parent


def _minitensor_modules():
    return {
        "torch": mt,
        "torch.nn": mt.nn,
        "torch.nn.functional": mt.nn.functional,
        "torch.optim": mt.optim,
        "torch.optim.lr_scheduler": mt.optim.lr_scheduler,
        "torch.nn.utils": mt.nn.utils,
        "torch.nn.utils.rnn": mt.nn.utils.rnn,
        "torch.utils": mt.utils,
        "torch.utils.data": mt.utils.data,
        "torch.cuda": mt.cuda,
    }


def load(filename, backend, edits=None):
    """The module in tests/`filename`, executed with `import torch` meaning `backend`
    ('torch' or 'minitensor'). `edits` {line: replacement}: the lines a port to minitensor
    still has to change beyond its imports (each line must occur exactly once; applied on the
    minitensor side only). sys.modules is restored afterwards, whatever happens."""
    path = HERE / filename
    module = types.ModuleType(f"{path.stem}_{backend}")
    module.__file__ = str(path)
    text = path.read_text()
    if backend == "torch":
        import torch  # noqa: F401  (the real one)

        exec(compile(text, str(path), "exec"), module.__dict__)
        return module
    for old, new in (edits or {}).items():
        if text.count(old) != 1:
            raise ValueError(f"port edit {old!r} matches {text.count(old)} times in {filename}")
        text = text.replace(old, new)
    swapped = _minitensor_modules()
    saved = {k: sys.modules.get(k) for k in swapped}
    sys.modules.update(swapped)
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


def tensor(backend, array):
    """`array` as the backend's tensor (ids stay int64, floats float32)."""
    import torch

    a = np.asarray(array)
    return torch.tensor(a) if backend == "torch" else mt.tensor(a)


def numpy(t):
    """A backend tensor's values as numpy (torch: detached)."""
    return (
        t.detach().numpy()
        if hasattr(t, "detach") and not isinstance(t, mt.Tensor)
        else np.asarray(t.data)
    )


def compare_grads(ours, theirs, atol):
    """Every parameter's gradient, by name, in both models."""
    theirs_grads = {n: p.grad for n, p in theirs.named_parameters()}
    names = [n for n, _ in ours.named_parameters()]
    assert names == list(theirs_grads)
    for n, p in ours.named_parameters():
        if theirs_grads[n] is None:
            assert p.grad is None or not np.any(p.grad.data), n
            continue
        np.testing.assert_allclose(
            p.grad.data, theirs_grads[n].numpy(), atol=atol, rtol=1e-4, err_msg=n
        )
