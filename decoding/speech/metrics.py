"""Word error rate and word alignment: pure functions over text.

    normalise     lower case, punctuation dropped (an apostrophe inside a word kept), split on spaces.
    align         a minimum-edit alignment of hypothesis words to reference words (Levenshtein, the
                  usual WER alignment): pairs (ref index or None, hyp index or None).
    wer           (substitutions + deletions + insertions) / reference words.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def normalise(text: str) -> list[str]:
    """The words WER compares: lower case, digits and letters, apostrophes inside words."""
    return _WORD.findall(text.lower().replace("’", "'"))


def align(reference: list[str], hypothesis: list[str]) -> list[tuple[int | None, int | None]]:
    """A minimum-edit alignment: (i, j) a match or substitution, (i, None) a deletion, (None, j) an insertion.
    Ties prefer a match/substitution, then a deletion, so the pairs are deterministic."""
    n, m = len(reference), len(hypothesis)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = i
    for j in range(m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i][j] = min(cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]),
                             cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    pairs, i, j = [], n, m
    while i or j:
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            pairs.append((i - 1, None))
            i -= 1
        else:
            pairs.append((None, j - 1))
            j -= 1
    return pairs[::-1]


def edits(reference: list[str], hypothesis: list[str]) -> int:
    return sum(1 for i, j in align(reference, hypothesis) if i is None or j is None or reference[i] != hypothesis[j])


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of `hypothesis` against `reference` (both normalised); ValueError for an empty reference."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        raise ValueError(f"`reference` has no words to score against, got {reference!r:.80}")
    return edits(ref, hyp) / len(ref)


LOOP_WORDS = 8  # the longest phrase a loop is looked for in (issue 46 says 1-4 words; Whisper also loops on longer
#                ones: "the ocean was turned to the ocean, the ocean was turned to the ocean, ...")


def longest_repeat(text: str, max_words: int = LOOP_WORDS) -> dict:
    """The phrase of 1..`max_words` words repeated most times in a row in `text` (normalised words): {"phrase",
    "times"}; times 1 when nothing repeats. A stream "loops" when some phrase comes 4 or more times in a row ("the
    wind the wind the wind the wind")."""
    words = normalise(text)
    best = {"phrase": " ".join(words[:1]), "times": 1 if words else 0}
    for n in range(1, max_words + 1):
        for start in range(len(words) - n + 1):
            phrase, times = words[start:start + n], 1
            while words[start + times * n:start + (times + 1) * n] == phrase:
                times += 1
            if times > best["times"]:
                best = {"phrase": " ".join(phrase), "times": times}
    return best


def loops(text: str) -> bool:
    """Whether some phrase of 1-8 words comes four or more times in a row (issue 46's definition of a loop, with
    phrases up to 8 words rather than 4)."""
    return longest_repeat(text)["times"] >= 4
