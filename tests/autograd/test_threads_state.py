"""Gradient mode, anomaly mode and module scopes are per thread, as in PyTorch."""

import threading

import numpy as np

import minitensor as mt


def _in_turn(*steps):
    """Run steps[i] = (thread_name, fn) in this exact order, each in its own named thread
    (two threads, alternating by events), and return what each fn returned."""
    names = sorted({name for name, _ in steps})
    turn = {name: threading.Event() for name in names}
    done = threading.Event()
    results, errors, position = [], [], [0]

    def worker(me):
        try:
            while position[0] < len(steps):
                turn[me].wait()
                turn[me].clear()
                if position[0] >= len(steps):
                    break
                _, fn = steps[position[0]]
                results.append(fn())
                position[0] += 1
                if position[0] == len(steps):
                    done.set()
                    for t in turn.values():
                        t.set()
                    break
                turn[steps[position[0]][0]].set()
        except BaseException as e:  # noqa: BLE001 - reported to the test's thread
            errors.append(e)
            done.set()
            for t in turn.values():
                t.set()

    threads = [threading.Thread(target=worker, args=(n,)) for n in names]
    for t in threads:
        t.start()
    turn[steps[0][0]].set()
    done.wait(timeout=30)
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return results


def test_no_grad_blocks_entered_and_left_across_threads_restore_each_thread():
    blocks = {}

    def enter(name):
        def fn():
            blocks[name] = mt.no_grad()
            blocks[name].__enter__()
            return mt.is_grad_enabled()

        return fn

    def leave(name):
        def fn():
            blocks[name].__exit__(None, None, None)
            return mt.is_grad_enabled()

        return fn

    # A enters, B enters, A exits, B exits: each thread ends with autograd on
    seen = _in_turn(("A", enter("A")), ("B", enter("B")), ("A", leave("A")), ("B", leave("B")))
    assert seen == [False, False, True, True]
    assert mt.is_grad_enabled()


def test_a_thread_in_no_grad_does_not_stop_another_threads_graph():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    inside = threading.Event()
    release = threading.Event()
    out = {}

    def inference():
        with mt.no_grad():
            inside.set()
            release.wait(timeout=30)
            out["inference"] = (x * 2.0).requires_grad

    t = threading.Thread(target=inference)
    t.start()
    inside.wait(timeout=30)
    loss = (x * x).sum()  # this thread is not in no_grad
    release.set()
    t.join(timeout=30)
    assert loss.grad_fn is not None
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    assert out["inference"] is False


def test_anomaly_mode_is_per_thread():
    block = mt.autograd.detect_anomaly()  # kept here: entered in A, left at the end
    seen = _in_turn(
        ("A", block.__enter__),
        ("B", mt.autograd.is_anomaly_enabled),
        ("A", mt.autograd.is_anomaly_enabled),
        ("A", lambda: block.__exit__(None, None, None)),
    )
    assert seen[1:3] == [False, True]
    assert not mt.autograd.is_anomaly_enabled()


def test_module_scopes_of_two_threads_do_not_mix():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    nodes = {}
    blocks = {}

    def enter(name):
        def fn():
            blocks[name] = mt.scope(name)
            blocks[name].__enter__()
            return mt.current_scope()

        return fn

    def op(name):
        def fn():
            nodes[name] = (x * 1.0).grad_fn
            return mt.current_scope()

        return fn

    seen = _in_turn(("A", enter("a")), ("B", enter("b")), ("A", op("A")), ("B", op("B")))
    assert seen == ["a", "b", "a", "b"]
    assert nodes["A"].scope == "a" and nodes["B"].scope == "b"
    assert mt.current_scope() == ""
