import numpy as np
import pytest

from transformer.tasks import AdditionTask, CopyTask, ReverseTask


def test_addition_format_is_fixed_width_and_reversed():
    task = AdditionTask(digits=3)
    src, tgt = task.encode([23, 999], [456, 999])
    assert src.shape == (2, 7) and tgt.shape == (2, 5)
    tok = task.tokenizer
    assert tok.decode(src[0]) == "023+456"
    assert tok.decode(tgt[0]) == "9740"  # 479 → "0479" → reversed
    assert tgt[0, -1] == tok.eos_id
    assert task.read_answer("8991") == 1998
    assert task.read_answer("99") is None and task.read_answer("9a91") is None


def test_addition_normal_order():
    task = AdditionTask(digits=2, reverse_answer=False)
    assert task.answer_text(7) == "007"
    assert task.read_answer("198") == 198


def test_heldout_is_fixed_and_never_sampled():
    task = AdditionTask(digits=2, heldout_size=500, heldout_seed=5)
    again = AdditionTask(digits=2, heldout_size=500, heldout_seed=5)
    np.testing.assert_array_equal(task.heldout_a, again.heldout_a)
    keys = set(zip(task.heldout_a.tolist(), task.heldout_b.tolist()))
    assert len(keys) == 500
    a, b = task.sample(20000, np.random.default_rng(0))
    assert not any((x, y) in keys for x, y in zip(a.tolist(), b.tolist()))
    assert task.is_heldout(task.heldout_a, task.heldout_b).all()


def test_sampling_is_deterministic_per_seed():
    task = AdditionTask()
    s1, t1 = task.batch(16, np.random.default_rng(3))
    s2, t2 = task.batch(16, np.random.default_rng(3))
    s3, _ = task.batch(16, np.random.default_rng(4))
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_array_equal(t1, t2)
    assert not np.array_equal(s1, s3)


def test_correct_reads_greedy_outputs():
    task = AdditionTask(digits=1)
    tok = task.tokenizer
    good = tok.encode_batch([task.answer_text(3 + 4)], add_eos=True)
    bad = tok.encode_batch(["80"], add_eos=True)
    assert task.correct(np.concatenate([good, bad]), [3, 3], [4, 4]).tolist() == [True, False]
    assert "WRONG" in task.describe(3, 4, "80") and "ok" in task.describe(3, 4, "70")


def test_addition_rejects_bad_sizes():
    with pytest.raises(ValueError, match="digits"):
        AdditionTask(digits=0)
    with pytest.raises(ValueError, match="heldout_size"):
        AdditionTask(digits=1, heldout_size=90)


@pytest.mark.parametrize("cls", [CopyTask, ReverseTask])
def test_copy_and_reverse_pad_and_end_with_eos(cls):
    task = cls(alphabet="abc", min_len=1, max_len=5)
    texts = task.sample(50, np.random.default_rng(0))
    assert all(1 <= len(t) <= 5 for t in texts) and len({len(t) for t in texts}) > 1
    src, tgt = task.encode(texts)
    assert src.shape == (50, 5) and tgt.shape == (50, 6)
    tok = task.tokenizer
    for t, s, g in zip(texts, src, tgt):
        assert tok.decode(s) == t
        assert tok.decode(g) == task.transform(t)
        assert g[len(t)] == tok.eos_id and (g[len(t) + 1 :] == tok.pad_id).all()
    assert task.correct(tgt, texts).all()
    assert ReverseTask().transform("abc") == "cba"


@pytest.mark.parametrize("digits, reverse", [(1, True), (3, True), (3, False), (9, False)])
def test_addition_ids_are_the_tokenized_texts(digits, reverse):
    """encode works the ids out with numpy: they are the tokenizer's ids of problem_text and
    answer_text, edge operands (0, the largest, a carry into the extra digit) included."""
    task = AdditionTask(digits=digits, reverse_answer=reverse, heldout_size=1)
    a, b = task.sample(200, np.random.default_rng(digits))
    top = task.high - 1
    a, b = np.concatenate([a, [0, top, top, 0]]), np.concatenate([b, [0, top, 0, top]])
    src, tgt = task.encode(a, b)
    tok = task.tokenizer
    texts = [task.problem_text(x, y) for x, y in zip(a, b)]
    np.testing.assert_array_equal(src, tok.encode_batch(texts))
    answers = [task.answer_text(x + y) for x, y in zip(a, b)]
    np.testing.assert_array_equal(tgt, tok.encode_batch(answers, add_eos=True))
    assert src.dtype == tgt.dtype == np.int64


def test_addition_encode_rejects_operands_out_of_range():
    task = AdditionTask(digits=2)
    with pytest.raises(ValueError, match=r"AdditionTask.encode: operands must be in 0..99"):
        task.encode([5, 100], [1, 2])
    with pytest.raises(ValueError, match="0..99"):
        task.encode([-1], [1])
    with pytest.raises(ValueError, match="2 first operands, 1 second"):
        task.encode([1, 2], [3])
    src, tgt = task.encode([], [])
    assert src.shape == (0, 5) and tgt.shape == (0, 4)
