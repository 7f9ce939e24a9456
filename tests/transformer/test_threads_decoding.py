"""One model decoded from two threads, backend blocks in two threads, and decoding's argument
checks.

Decoding runs the model as in eval mode without touching `module.training` (another thread may
be training the same model), and a `use_backend` block belongs to the thread that entered it.
The threads are forced to interleave with barriers, so each test fails on the old behaviour
every time, not by luck.
"""

import threading

import numpy as np
import pytest

import minitensor as mt
from minitensor import kernels as K
from transformer import (
    DecoderOnlyLM,
    Transformer,
    TransformerConfig,
    beam_search,
    generate,
    greedy_decode,
    sample,
)

BOS, EOS = 1, 2
TIMEOUT = 60


def _model():
    mt.manual_seed(0)
    cfg = TransformerConfig.tiny(10, 12, dropout=0.5)  # dropout on: eval mode must matter
    return Transformer(cfg)


def _threads(*targets):
    """Run each target in its own thread; re-raise the first error in the test's thread."""
    errors = []

    def run(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def _pause_in_decode(model, barrier):
    """Make the model's first decoding step wait at `barrier` twice (inside the decoder's eval
    block): the other thread acts between the two waits."""
    original, calls = model.decode, []

    def decode(*args, **kwargs):
        if not calls:
            calls.append(1)
            barrier.wait(TIMEOUT)  # decoding has begun
            barrier.wait(TIMEOUT)  # the other thread has acted
        return original(*args, **kwargs)

    model.decode = decode


DECODERS = {
    "greedy": lambda m, src: greedy_decode(m, src, 6, BOS, EOS),
    "beam": lambda m, src: beam_search(m, src, 6, BOS, EOS, beam_size=3),
    "sample": lambda m, src: sample(m, src, 6, BOS, EOS, temperature=1.0, seed=3),
}


@pytest.mark.parametrize("how", sorted(DECODERS))
def test_decoding_while_another_thread_trains_the_model(how):
    """Thread A decodes; meanwhile thread B puts the model in training mode (as a training
    loop's model.train() does) and runs a training forward with dropout. A's tokens are those
    of a decode alone, B's forward has dropout on, and the model stays in training mode."""
    model = _model()
    src = np.random.default_rng(0).integers(3, 10, (64, 5))
    want = DECODERS[how](model, src)
    assert model.training  # the decoder left the flag as it was
    barrier, got, seen = threading.Barrier(2), {}, {}
    _pause_in_decode(model, barrier)

    def decode():
        got["ids"] = DECODERS[how](model, src)

    def train():
        barrier.wait(TIMEOUT)
        model.train()
        seen["training"] = model.training
        x = mt.randn(4, 8, 16)
        seen["dropped"] = bool((model.encoder.layers[0].dropout1(x).numpy() == 0).any())
        barrier.wait(TIMEOUT)

    _threads(decode, train)
    np.testing.assert_array_equal(got["ids"], want)
    assert seen == {"training": True, "dropped": True}
    assert model.training and all(m.training for m in model.modules())


def test_the_decoder_thread_sees_eval_mode_and_the_flag_is_untouched():
    model = _model()
    barrier, seen = threading.Barrier(2), {}
    _pause_in_decode(model, barrier)
    original = model.decode

    def decode_and_look(*args, **kwargs):
        seen.setdefault("inside", model.training)
        return original(*args, **kwargs)

    model.decode = decode_and_look

    def other():
        barrier.wait(TIMEOUT)
        seen["other"] = model.training
        barrier.wait(TIMEOUT)

    _threads(lambda: greedy_decode(model, np.full((2, 4), 5), 3, BOS, EOS), other)
    assert seen == {"inside": False, "other": True}
    assert model.training
    model.eval()
    greedy_decode(model, np.full((2, 4), 5), 3, BOS, EOS)
    assert not model.training  # an eval model stays in eval mode too


def test_generate_from_two_threads_at_once_gives_each_its_own_answer():
    mt.manual_seed(1)
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, 12, dropout=0.5))
    prompts = {name: np.random.default_rng(seed).integers(3, 12, (8, 3)) for name, seed in
               (("a", 1), ("b", 2))}  # fmt: skip
    want = {name: generate(lm, p, 5) for name, p in prompts.items()}
    barrier, got = threading.Barrier(2), {}
    original = lm.forward

    def forward(*args, **kwargs):  # each thread's first step waits for the other's
        if threading.current_thread().name not in got:
            got[threading.current_thread().name] = None
            barrier.wait(TIMEOUT)
        return original(*args, **kwargs)

    lm.forward = forward

    def run(name):
        def fn():
            threading.current_thread().name = name
            got[name] = generate(lm, prompts[name], 5)
            lm.train()  # one thread finishing (and training) must not disturb the other

        return fn

    _threads(run("a"), run("b"))
    for name in prompts:
        np.testing.assert_array_equal(got[name], want[name])


# ---- use_backend blocks are per thread ---------------------------------------------------------


def test_overlapping_use_backend_blocks_in_two_threads_are_per_thread():
    """A enters numpy, B enters numba, A leaves, B leaves: each thread sees its own choice
    throughout, another thread the process-wide one, and the process ends where it began."""
    before = mt.get_backend()
    calls = {"a": [], "b": []}
    kernel = K.dispatch(lambda who: calls[who].append("numba"),
                        lambda who: calls[who].append("numpy"))  # fmt: skip
    steps = [threading.Event() for _ in range(4)]
    seen = {}

    def a():
        with K.use_backend("numpy"):
            steps[0].set()
            steps[1].wait(TIMEOUT)  # B is inside its block
            seen["a"] = mt.get_backend()
            kernel("a")
        steps[2].set()

    def b():
        steps[0].wait(TIMEOUT)  # A is inside its block
        seen["b outside"] = mt.get_backend()
        with K.use_backend("numba"):
            steps[1].set()
            steps[2].wait(TIMEOUT)  # A has left its block
            seen["b"] = mt.get_backend()
            kernel("b")
            seen["main"] = _backend_in_a_new_thread()

    _threads(a, b)
    assert seen == {"a": "numpy", "b outside": before, "b": "numba", "main": before}
    assert calls == {"a": ["numpy"], "b": ["numba"]}
    assert mt.get_backend() == before


def _backend_in_a_new_thread():
    out = []
    t = threading.Thread(target=lambda: out.append(mt.get_backend()))
    t.start()
    t.join(TIMEOUT)
    return out[0]


def test_set_backend_stays_process_wide_and_a_block_still_restores():
    before = mt.get_backend()
    try:
        with K.use_backend("numpy"):
            mt.set_backend("numba")
            assert mt.get_backend() == "numba"  # the caller sees what it set
        assert mt.get_backend() == "numba"
        mt.set_backend("numpy")
        assert _backend_in_a_new_thread() == "numpy"  # set_backend reaches every thread
    finally:
        mt.set_backend(before)


# ---- decoding's arguments ----------------------------------------------------------------------

SRC = np.full((2, 4), 5)
BAD = [
    (lambda m: greedy_decode(m, SRC, 0, BOS, EOS), r"greedy_decode: max_len must be .*got 0"),
    (lambda m: greedy_decode(m, SRC, -3, BOS, EOS), r"max_len must be an integer >= 1, got -3"),
    (lambda m: sample(m, SRC, 0, BOS, EOS), r"sample: max_len .* got 0"),
    (lambda m: beam_search(m, SRC, 0, BOS, EOS), r"beam_search: max_len .* got 0"),
    (lambda m: beam_search(m, SRC, 4, BOS, EOS, beam_size=0), r"beam_size must be .*got 0"),
    (lambda m: beam_search(m, SRC, 4, BOS, EOS, beam_size=13),
     r"beam_search: beam_size=13 is larger than the vocabulary size \(12\)"),
    (lambda m: sample(m, SRC, 4, BOS, EOS, temperature=0), r"sample: temperature .*got 0"),
    (lambda m: sample(m, SRC, 4, BOS, EOS, temperature=-1.5), r"temperature .*got -1.5"),
    (lambda m: sample(m, SRC, 4, BOS, EOS, top_p=0.0), r"sample: top_p must be in \(0, 1\].*0.0"),
    (lambda m: sample(m, SRC, 4, BOS, EOS, top_p=1.5), r"top_p .*got 1.5"),
    (lambda m: sample(m, SRC, 4, BOS, EOS, top_k=0), r"sample: top_k must be .*got 0"),
    (lambda m: sample(m, SRC, 4, BOS, EOS, top_k=20),
     r"sample: top_k=20 is larger than the vocabulary size \(12\)"),
]  # fmt: skip


@pytest.mark.parametrize("call, message", BAD)
def test_bad_decoding_arguments_name_the_argument_and_value(call, message):
    with pytest.raises(ValueError, match=message):
        call(_model())


def test_bad_generate_arguments_name_the_argument_and_value():
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, 12))
    prompt = np.full((2, 3), 4)
    with pytest.raises(ValueError, match=r"generate: max_new_tokens .*got 0"):
        generate(lm, prompt, 0)
    with pytest.raises(ValueError, match=r"generate: top_k=13 is larger than the vocabulary"):
        generate(lm, prompt, 3, top_k=13)
    with pytest.raises(ValueError, match=r"generate: temperature .*got 0"):
        generate(lm, prompt, 3, temperature=0.0)
    with pytest.raises(ValueError, match=r"generate: top_p .*got -0.1"):
        generate(lm, prompt, 3, top_p=-0.1)


def test_the_edge_values_are_accepted():
    model = _model().eval()
    assert beam_search(model, SRC, 1, BOS, EOS, beam_size=12).shape == (2, 1)
    assert sample(model, SRC, 1, BOS, EOS, top_k=12, top_p=1.0, seed=0).shape == (2, 1)
