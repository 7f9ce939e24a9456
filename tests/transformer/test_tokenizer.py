import numpy as np
import pytest

from transformer.tokenizer import BOS, EOS, PAD, UNK, CharTokenizer, Vocab, pad_sequences


def test_specials_have_fixed_ids_and_pad_is_zero():
    v = Vocab(["a", "b", "a", "<eos>"])
    assert [v.pad_id, v.bos_id, v.eos_id, v.unk_id] == [0, 1, 2, 3]
    assert v.itos[:4] == [PAD, BOS, EOS, UNK]
    assert len(v) == 6  # "a" and the special "<eos>" are not added twice
    assert v.token_to_id("b") == 5 and v.id_to_token(4) == "a"


def test_unknown_symbols_map_to_unk_and_stay_visible():
    tok = CharTokenizer("abc")
    ids = tok.encode("abz")
    assert ids == [4, 5, tok.unk_id]
    assert tok.decode(ids) == "ab<unk>"


def test_encode_decode_round_trip_with_bos_eos():
    tok = CharTokenizer("0123456789+")
    ids = tok.encode("123+456", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and len(ids) == 9
    assert tok.decode(ids) == "123+456"


def test_decode_stops_at_eos_and_drops_pad():
    tok = CharTokenizer("xy")
    x, y = tok.encode("xy")
    assert tok.decode([x, 0, y, tok.eos_id, x, x]) == "xy"
    assert tok.decode([x, tok.eos_id, y], stop_at_eos=False) == "xy"


def test_batch_encoding_pads_on_the_right():
    tok = CharTokenizer("abc")
    batch = tok.encode_batch(["a", "abc", ""], add_eos=True)
    assert batch.dtype == np.int64 and batch.shape == (3, 4)
    np.testing.assert_array_equal(batch[0], [4, 2, 0, 0])
    np.testing.assert_array_equal(batch[2], [2, 0, 0, 0])
    assert tok.decode_batch(batch) == ["a", "abc", ""]
    assert tok.encode_batch(["ab"], max_len=5).shape == (1, 5)


def test_bad_input_raises_clear_errors():
    tok = CharTokenizer("ab")
    with pytest.raises(ValueError, match="max_len"):
        tok.encode_batch(["abab"], max_len=3)
    with pytest.raises(TypeError, match="string"):
        tok.encode(123)
    with pytest.raises(IndexError, match="out of range"):
        tok.decode([99])
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        tok.decode_batch([1, 2])
    assert pad_sequences([[1], [2, 3]], pad_id=7).tolist() == [[1, 7], [2, 3]]
