"""Twenty held-out prompts of five kinds for the speculative benchmark (`bench_speculative.py --set`).

Written for this benchmark (none is in a drafter's training prompts, `decoding.training.eagle_prompts`):
four each of summarising a passage, answering from a passage, editing code, continuing a story and
writing a list. Prompt lookup pays where the answer reuses the prompt's words (summaries, answers,
code edits) and not where it does not (stories, lists): the set is meant to show both.
"""

from __future__ import annotations

_LIGHTHOUSE = ("The lighthouse on the northern cliff was built in 1871 to warn ships away from the rocks. For a hundred "
               "years a keeper lived in the small stone house beside it, climbing the tower every evening to light the "
               "lamp. In 1971 the lamp was automated and the keeper's house became a small museum.")
_BEES = ("Honey bees live in colonies of up to sixty thousand workers, one queen and a few hundred drones. The workers "
         "are female; they clean the hive, feed the young, build wax comb and, in the last weeks of their lives, fly "
         "out to gather nectar and pollen. A worker born in summer lives about six weeks.")
_RIVER = ("The river town of Alder Ford grew around a wooden bridge built by millers in 1790. When the railway arrived "
          "in 1862 the mills closed one by one, and the town turned to making bricks from the clay of the riverbanks. "
          "The brickworks closed in 1958, and today the old kilns hold a bakery, a library and a bicycle shop.")
_MARKET = ("Every Saturday the market fills the square with stalls selling bread, cheese, apples and flowers. It opens "
           "at seven in the morning and closes at one in the afternoon. Stall holders pay a fee of twelve pounds a day, "
           "and half of the fees pay for cleaning the square after the market.")
_CODE_SUM = "def total(values):\n    result = 0\n    for v in values:\n        result = result + v\n    return result\n"
_CODE_NAME = ("def get_user(users, user_id):\n    for user in users:\n        if user['id'] == user_id:\n"
              "            return user\n    return None\n")
_CODE_LOOP = ("def squares(n):\n    out = []\n    i = 0\n    while i < n:\n        out.append(i * i)\n        i += 1\n"
              "    return out\n")
_CODE_FILE = ("def read_lines(path):\n    f = open(path)\n    lines = f.read().split('\\n')\n    f.close()\n"
              "    return lines\n")

PROMPTS: dict[str, list[str]] = {
    "summarise": [
        f"Summarise this paragraph in two sentences, reusing its words.\n\n{_LIGHTHOUSE}",
        f"Summarise this paragraph in one sentence.\n\n{_BEES}",
        f"Give a short summary of this text, keeping its key facts.\n\n{_RIVER}",
        f"Summarise the following for a notice board, in two sentences.\n\n{_MARKET}",
    ],
    "answer": [
        f"{_LIGHTHOUSE}\n\nAccording to the text, what happened to the keeper's house, and when?",
        f"{_BEES}\n\nUsing the passage, explain what worker bees do during their lives.",
        f"{_RIVER}\n\nFrom the passage: why did the town turn to making bricks?",
        f"{_MARKET}\n\nAnswer from the text: when does the market open and close, and what do the fees pay for?",
    ],
    "code": [
        f"Rewrite this Python function to use the built-in sum, keeping its name.\n\n{_CODE_SUM}",
        f"Add type hints to this Python function and keep the body the same.\n\n{_CODE_NAME}",
        f"Rewrite this function with a for loop over range(n) instead of the while loop.\n\n{_CODE_LOOP}",
        f"Change this function to open the file with a with statement.\n\n{_CODE_FILE}",
    ],
    "story": [
        "Continue this story: The last train of the night stopped at a station that was not on any map.",
        "Continue the story: When the baker opened her shop that morning, a fox was sitting on the counter.",
        "Write the next paragraph: The old map showed an island where the sea had always been empty.",
        "Continue: On his hundredth birthday, my grandfather finally told us about the box in the attic.",
    ],
    "list": [
        "List eight things to pack for a weekend camping trip.",
        "Write a list of ten fruits, one per line.",
        "Give me a numbered list of five tips for learning a new language.",
        "List the days of the week and one chore for each day.",
    ],
}


def prompt_set() -> list[tuple[str, str]]:
    """(kind, prompt) for all twenty, kinds in order."""
    return [(kind, prompt) for kind, prompts in PROMPTS.items() for prompt in prompts]
