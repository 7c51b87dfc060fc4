"""Every reward's parameters are checked before any model work: a wrong type, an empty or malformed value,
or a huge one gets a ValueError naming the field, quoting the value (short) and saying what is allowed,
through `decoding.run.generate` (what the CLI, the API and the Scaling tab call). Before: `words=["a"]`
or `reference={"a": 1}` raised AttributeError from inside decoding/scaling/scoring.py."""

import pytest

from decoding.run import generate
from decoding.scaling.scoring import REWARDS

# reward -> (bad parameters, what the message must say); every registered reward appears here or in NO_PARAMS
BAD = {
    "required-words": [
        ({"words": ["a"]}, r"`required-words.words` must be text \(word,word\), got \['a'\]"),
        ({"words": {"a": 1}}, r"`required-words.words` must be text \(word,word\), got \{'a': 1\}"),
        ({"words": ""}, r"reward required-words needs `words`, comma-separated"),
        ({"words": " , ,"}, r"`required-words.words` must be a non-empty list of non-empty strings"),
        ({"words": "sun," * 400}, r"`required-words.words` is 1600 characters long; at most 1000 \(word,word\)"),
        ({"words": "sun", "hard": "maybe"}, r"`required-words.hard` must be true or false, got 'maybe'"),
        ({"words": "sun", "hard": ["x"]}, r"`required-words.hard` must be true or false, got \['x'\]"),
    ],
    "final-answer": [
        ({"reference": {"a": 1}}, r"`reference` must be text \(a number\), got \{'a': 1\}"),
        ({"reference": 42}, r"`reference` must be text \(a number\), got 42"),
        ({"reference": ""}, r"reward final-answer needs `reference`, the expected number"),
        ({"reference": "forty"}, r"`reference` must be a number, got 'forty' \(a finite number such as 42"),
        ({"reference": "nan"}, r"`reference` must be a number, got 'nan'"),
        ({"reference": "1e999"}, r"`reference` must be a number, got '1e999'"),
    ],
    "forbid-letter": [
        ({"letter": ["e"]}, r"`forbid-letter.letter` must be text \(a letter\), got \['e'\]"),
        ({"letter": "ee"}, r"`forbid-letter.letter` must be a single letter, got 'ee' \(one letter such as e\)"),
        ({"letter": "7"}, r"`forbid-letter.letter` must be a single letter"),
        ({"letter": ""}, r"`forbid-letter.letter` must be a single letter"),
    ],
    "max-word-length": [
        ({"max_word_length": 0}, r"`max-word-length.max_word_length` must be an integer in \[1, 40\], got 0"),
        ({"max_word_length": [5]}, r"`max-word-length.max_word_length` must be an integer, got \[5\]"),
        ({"max_word_length": 1e9}, r"`max-word-length.max_word_length` must be an integer in \[1, 40\]"),
    ],
    "lm-judge": [
        ({"judge_model": ["x"]}, r"`lm-judge.judge_model` must be text \(name or hub id\), got \['x'\]"),
        ({"judge_model": "../assets/tiny-ar"},
         r"unknown model '../assets/tiny-ar' for `lm-judge.judge_model`: that is a local path"),
        ({"judge_model": "x" * 5000}, r"`lm-judge.judge_model` is 5000 characters long; at most 1000"),
        ({"judge_model": "a/" + "b" * 300}, r"`lm-judge.judge_model` .* is too long for a model id: at most 256 characters"),
    ],
    "prm": [
        ({"prm_model": 7}, r"`prm.prm_model` must be text \(hub id\), got 7"),
        ({"prm_model": "/etc/passwd"}, r"unknown model '/etc/passwd' for `prm.prm_model`: that is a local path"),
    ],
}
NO_PARAMS = {"arith-step", "arith-lastdigit", "spare", "spare-prm", "probe", "self-eval", "none"}  # they read no
#   parameter of their own
COMMON = [  # what every reward shares
    ({"reward": ["arith-step"]}, r"`reward` must be text, got \['arith-step'\]"),
    ({"reward": "nope"}, r"`reward` must be one of arith-step, .*, got 'nope'"),
    ({"aggregate": "median"}, r"`aggregate` must be one of last, min, mean, product, got 'median'"),
]


def cases():
    for reward, bad in BAD.items():
        for params, match in bad:
            yield pytest.param({"reward": reward} | params, match, id=f"{reward}-{next(iter(params))}")
    for params, match in COMMON:
        yield pytest.param(params, match, id=f"common-{next(iter(params))}")


def test_every_reward_is_audited():
    assert set(REWARDS.names()) == set(BAD) | NO_PARAMS, "a new reward: add its bad parameters to BAD"
    checked = {n for n in REWARDS.names() if REWARDS.capability(n, "rule") or REWARDS.capability(n, "precheck")}
    assert checked >= set(BAD), "a reward with parameters checks them before any model work"


@pytest.mark.parametrize("params, match", list(cases()))
def test_bad_reward_parameters_are_named_before_any_model_work(params, match):
    with pytest.raises(ValueError, match=match) as err:
        list(generate("tiny-random", "Q: 1 + 1?\n", strategy="best-of-n", max_new_tokens=2, params=params))
    assert len(str(err.value)) < 800  # the value quoted short, whatever its size (the model list is the rest)


@pytest.mark.parametrize("strategy", ["particle-filter", "majority-vote", "reward-beam"])
def test_other_methods_check_the_same_way(strategy):
    with pytest.raises(ValueError, match=r"`required-words.words` must be text \(word,word\), got \['a'\]"):
        list(generate("tiny-random", "hi", strategy=strategy, max_new_tokens=2,
                      params={"reward": "required-words", "words": ["a"]}))


def test_good_reward_parameters_still_run():
    trace = list(generate("tiny-random", "hi", strategy="best-of-n", max_new_tokens=2,
                          params={"n": 2, "reward": "required-words", "words": "sun, moon", "hard": False}))
    assert trace
