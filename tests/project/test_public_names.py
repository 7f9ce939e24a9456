"""`mt.__all__` names the package's public API: what `from minitensor import *` gives and what
documentation tools list. Every public name it lists exists, and every public function, class
and constant of `mt.` is in it (submodules only when they are part of the user's API)."""

import types

import minitensor as mt

PUBLIC_SUBMODULES = {"nn", "functional", "optim", "viz", "autograd", "config"}


def test_every_name_in_all_exists():
    assert [n for n in mt.__all__ if not hasattr(mt, n)] == []
    assert len(mt.__all__) == len(set(mt.__all__))


def test_every_public_name_is_in_all():
    public = {
        n
        for n, v in vars(mt).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert sorted(public - set(mt.__all__)) == []
    assert PUBLIC_SUBMODULES <= set(mt.__all__)
