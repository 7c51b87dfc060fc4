"""Word error rate and alignment on hand-made sentences."""

import pytest

from decoding.speech.metrics import align, normalise, wer


def test_normalise_drops_case_and_punctuation_keeps_apostrophes():
    assert normalise(" The dog's bone, 42 times!") == ["the", "dog's", "bone", "42", "times"]


def test_wer_counts_substitutions_deletions_and_insertions():
    assert wer("the quick brown fox", "The quick brown fox.") == 0.0
    assert wer("the quick brown fox", "the quick round fox") == 0.25
    assert wer("the quick brown fox", "the brown fox") == 0.25
    assert wer("the quick brown fox", "the very quick brown fox jumps") == 0.5
    with pytest.raises(ValueError, match="`reference` has no words"):
        wer("...", "anything")


def test_align_pairs_each_word_once_in_order():
    pairs = align(["a", "b", "c"], ["a", "x", "c", "d"])
    assert pairs == [(0, 0), (1, 1), (2, 2), (None, 3)]
    assert align([], ["a"]) == [(None, 0)] and align(["a"], []) == [(0, None)]


def test_the_longest_repeat_finds_a_loop_and_nothing_in_plain_text():
    from decoding.speech.metrics import longest_repeat, loops

    assert longest_repeat("By noon the wind, the wind the wind the wind rose.") == {"phrase": "the wind", "times": 4}
    assert loops("the children ran the children ran the children ran the children ran")
    assert not loops("It is what it is, and that is that.")  # "is" twice, never four in a row
    assert longest_repeat("no no no") == {"phrase": "no", "times": 3}
    assert longest_repeat("") == {"phrase": "", "times": 0}
    assert loops("at the end, the ocean was turned to the ocean, the ocean was turned to the ocean, the ocean was "
                 "turned to the ocean, the ocean was turned to the ocean")  # a six-word phrase: a loop too
