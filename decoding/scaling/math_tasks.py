"""Generated multi-step arithmetic word problems for `tiny-math`, the scaling lab's own policy.

A problem is a short story with a running count; the solution is one `a op b = c` line per
operation, then "The answer is N.":

    Mia has 37 shells. She gets 45 more, gives away 18, multiplies them by 3, then gets 20 more. How many shells now?
    37 + 45 = 82
    82 - 18 = 64
    64 * 3 = 192
    192 + 20 = 212
    The answer is 212.

Glossary
    step        one solution line `a op b = c`; `a` is the previous result (or the start count).
    difficulty  the number of steps, 3 to 8.
    noise       training documents only: each step's result is replaced, with probability
                `NOISE_RATE`, by a nearby wrong value (one digit off by one, as a slipped carry
                would make); the following steps continue consistently from the written value.
                So the policy learns step-local, stochastic slips, not a systematic bug, and a
                step checker sees exactly one wrong line per slip.
    names/items a problem's person (with She or He) and plural item. Training draws from open
                lists (`OPEN`: 584 names of many origins, 296 plural count nouns), so the model
                learns to read any one-word name and item, not ten it memorised (issue 27).
    held out    val, test, open and unseen problems; their question texts never occur in the
                training split. val and test are the first tiny-math's splits (its 10 names and
                10 items, drawn exactly as then, so models are compared on the same problems);
                open uses the training lists' names and items; unseen uses only `HELD_OUT`'s,
                names and items that occur in no training problem.
    the form    what `check_question` accepts: the one question line `FORM` with the trained
                ranges; for other text it says why tiny-math cannot read it (the Scaling tab's
                note on a typed prompt).

Everything follows from one seed, so the same command writes the same files:

    python -m decoding.scaling.math_tasks --out /tmp/tiny-math/data     # train.txt, val.txt, {train,val,test,open,unseen}.jsonl
    python -m decoding.scaling.math_eval --model assets/tiny-math --split test --count 200 --samples 16
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

SEED = 0  # the one seed every split is derived from
NOISE_RATE = 0.05  # probability that a training step's result is a nearby wrong value
MIN_STEPS, MAX_STEPS = 3, 8
MAX_VALUE = 999  # every running count stays in [0, MAX_VALUE]
MAX_FACTOR_BASE = 99  # multiply only two-digit counts (by 2..9): three-digit products are out of reach
MIN_START, MAX_START = 2, 150  # the story's first count
SPLIT_SIZES = {"train": 120_000, "val": 500, "test": 500, "open": 500, "unseen": 500}
HELD_OUT_SPLITS = ("val", "test", "open", "unseen")  # see `make_splits`
ANSWER_PREFIX = "The answer is "

# The original ten names and items (the first tiny-math's whole vocabulary). The val and test splits
# are still drawn with them, exactly as for the first model, so old and new models share test problems.
_CLASSIC_NAMES = [("Mia", "She"), ("Tom", "He"), ("Anna", "She"), ("Sam", "He"), ("Lily", "She"), ("Ben", "He"),
                  ("Zoe", "She"), ("Leo", "He"), ("Emma", "She"), ("Max", "He")]
_CLASSIC_ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells", "coins", "stamps"]

# The open lists: names of many origins (plain ASCII spellings, one capitalised word) and plural
# count nouns (lowercase letters). Training draws from the first two pairs; the `unseen` split from
# the HELD-OUT lists only, which never occur in a training problem, so its accuracy measures how
# well the model reads a name or item it has never seen (issue 27: "Ava", "Noah", "buttons").
_SHE = """Mia Anna Lily Zoe Emma Olivia Sophia Isabella Charlotte Amelia Harper Evelyn Abigail Emily Ella
Elizabeth Camila Luna Sofia Avery Scarlett Victoria Madison Grace Chloe Penelope Riley Layla Nora Hazel
Aurora Ellie Stella Violet Hannah Leah Lucy Alice Ruby Ivy Clara Rose Sarah Julia Nina Eva Maya Laura
Elena Paula Marta Carmen Lucia Valeria Ximena Gabriela Daniela Fernanda Paloma Rocio Beatriz Joana
Leticia Mariana Yara Aiko Yuki Sakura Hana Mei Ling Xiu Jia Yan Seo Jiwoo Soyeon Priya Ananya Diya Kavya
Meera Lakshmi Aisha Fatima Zainab Amina Noor Yasmin Leila Samira Nadia Salma Zara Farah Mariam Esra Elif
Zeynep Defne Ayla Chiamaka Ngozi Adaeze Amara Zuri Imani Nia Ayana Wanjiru Akosua Abena Thandiwe Nomvula
Lerato Kaya Aponi Tala Leilani Malia Kalani Moana Ingrid Astrid Freya Sigrid Liv Saga Greta Heidi Klara
Frieda Anouk Sanne Femke Aoife Niamh Siobhan Ciara Roisin Maeve Isla Ailsa Morag Bronwen Carys Seren Olga
Irina Natasha Svetlana Katya Daria Milena Zofia Agnieszka Kasia Jana Petra Lenka Ilona Eszter Reka Ioana
Despina Eleni Katerina Chiara Giulia Francesca Alessia Camille Manon Ines Juliette Margaux Anais Celine
Noemie Brigitte Hedda Tove Mette Kirsten Dagny Rania Dalia Hiba Rasha Shirin Parisa Roya Nasrin Tahmina
Ayesha Sana Hira Mahnoor Anjali Pooja Sunita Rekha Divya Shreya Isha Tara Linh Thao Trang Hoa Mai Lan
Siti Putri Dewi Ayu Rina Maria Luz Rosa Esperanza Consuelo Guadalupe Pilar Dolores Ana Lina Mira Vera Dana
Edith Ruth Esther Miriam Naomi Tamar Yael Shira Noa Talia Keiko Naoko Emi Rin Yui Aya Jade Amber Megan
Holly Molly Kate Jessica Ashley Brittany Tiffany Kayla Destiny Jasmine Aaliyah Keisha Tanisha Ebony
Shanice Monique Latoya Gwen Joan Peggy Betty Doris Mabel Agnes Edna Opal Pearl Iris Fern Willow Sage
Wren Juniper Poppy Daisy"""
_HE = """Tom Sam Ben Leo Max Liam Oliver Elijah James William Henry Lucas Theodore Jack Levi Alexander Mateo
Daniel Michael Owen Samuel Ethan Joseph David Jacob Logan Jackson Carter Wyatt Luke Julian Isaac Gabriel
Caleb Adam Ryan Nathan Aaron Eli Connor Dylan Adrian Hugo Felix Oscar Arthur Louis Victor Paul Simon Peter
Andrew Mark George Harry Alfie Charlie Finn Rory Declan Cian Padraig Eoin Seamus Callum Angus Hamish Ewan
Dafydd Rhys Gareth Carlos Diego Javier Pablo Alejandro Santiago Mateus Joao Tiago Rafael Thiago Emilio
Ignacio Rodrigo Marco Luca Matteo Giorgio Lorenzo Davide Pietro Enzo Mathis Baptiste Julien Antoine Remy
Lars Sven Erik Bjorn Magnus Nils Anders Olav Jonas Lukas Klaus Dieter Jurgen Stefan Tobias Jan Pieter Daan
Bram Sem Piotr Tomasz Jakub Pavel Ivan Dmitri Sergei Alexei Nikolai Yuri Boris Mikhail Andrei Bogdan Vlad
Milos Goran Dragan Nikos Yannis Kostas Mehmet Emre Burak Kerem Omer Ali Omar Hassan Karim Tariq Yusuf
Ibrahim Khalid Hamza Bilal Zaid Rami Samir Nabil Reza Dariush Kian Arash Arjun Rohan Vikram Rahul Aarav
Vihaan Ishaan Kabir Sanjay Ravi Dev Nikhil Amit Imran Faisal Zubair Kenji Hiroshi Takeshi Haruto Sota Ren
Daiki Kaito Wei Jun Hao Lei Chen Ming Tao Jian Minho Jisung Hyun Dong Seojun Anh Minh Duc Quang Tuan Budi
Agus Rizal Eko Kwame Kofi Yaw Kojo Chinedu Emeka Obinna Tunde Segun Femi Jabari Kamau Otieno Baraka Juma
Sipho Thabo Mandla Tendai Tariku Dawit Tesfaye Kai Keanu Koa Ahanu Takoda Elan Hemi Tane Wiremu Kiran
Bruno Hector Ramon Felipe Andres Julio Cesar Manuel Miguel Jorge Luis Raul Sergio Ernesto Fidel Gustavo
Roberto Alberto Arturo Jose Juan Pedro Ruben Moses Abraham Elias Ezra Gideon Micah Jonah Amos Reuben Asher
Tyrone Darnell Jamal Malik Dwayne Marcus Terrence Andre Curtis Wesley Frank Walter Harold Chester Floyd
Otis Earl Vernon Rufus Clyde Homer Jasper Silas Rowan Ash Reed Forest"""
_ITEMS_OPEN = """apples pencils stickers marbles cookies books cards shells coins stamps oranges bananas pears plums
peaches cherries grapes lemons limes mangoes melons carrots potatoes tomatoes onions peppers beans peas nuts
walnuts almonds acorns pinecones leaves flowers roses tulips daisies seeds eggs muffins cupcakes donuts pies
cakes candies lollipops chocolates pretzels crackers sandwiches pancakes waffles bagels biscuits rolls
pizzas tacos noodles dumplings balloons kites toys dolls blocks puzzles games robots trucks cars trains
planes boats bikes wagons drums flutes bells whistles crayons markers erasers rulers notebooks folders
envelopes letters postcards photos posters maps tickets badges pins ribbons bows beads rings bracelets
necklaces earrings gems pearls crystals rocks pebbles stones bricks tiles nails screws bolts hammers tools
brushes paints jars bottles cups mugs plates bowls spoons forks knives pans pots baskets boxes bags buckets
boots socks shoes hats caps scarves gloves mittens shirts jackets coats dresses towels blankets pillows
candles lamps clocks watches keys locks chairs tables desks shelves mirrors frames windows doors gates
tents flags cones ducks chickens hens geese cows pigs sheep goats horses rabbits hamsters kittens puppies
cats dogs birds parrots owls frogs snails worms bees ants beetles butterflies ladybugs crabs lobsters
shrimps turtles lizards snakes feathers bones fossils trophies medals prizes gifts presents coupons tokens
chips dice dominoes pawns magnets batteries bulbs wires cables ropes strings threads needles spools twigs
sticks logs planks boards starfish corals rockets cubes spheres pyramids triangles circles comics
magazines newspapers novels poems songs crates barrels sacks kiwis figs dates apricots coconuts pineapples
berries strawberries blueberries raspberries olives radishes beets turnips cucumbers pumpkins squashes
zucchinis muffins pebbles seashells sunflowers daffodils lilies orchids cactuses ferns bushes trees
apps emails texts photos videos songs stories jokes riddles words pages chapters lessons quizzes tests
points goals runs laps miles steps jumps tricks votes likes stars planets moons comets"""
_SHE_HELD_OUT = """Ava Matilda Cordelia Rosalind Ottilie Wilhelmina Xiomara Itzel Citlali Yolanda Marisol Thuy
Phuong Yuna Minji Haruka Akane Sunniva Ragnhild Eilidh Grainne Dervla Nkechi Folake Yewande Makena Nyokabi
Shilpa Bhavna Nandini Parveen Golnaz Zahra Nesrin Gulnara Aigerim Lucinda Philippa Henrietta Imogen"""
_HE_HELD_OUT = """Noah Cormac Fintan Torin Ulf Leif Gunnar Thorsten Radek Zbigniew Casimir Ladislav Florin Ionut
Mircea Thanh Khanh Jiho Taeyang Ryota Shun Chidi Ikenna Oluwaseun Babajide Mwangi Kipchoge Njoroge Anselm
Barnabas Cuthbert Ambrose Leopold Alvaro Joaquin Esteban Aurelio Prakash Sudhir Farhan Anwar"""
_ITEMS_HELD_OUT = """buttons thimbles zippers kazoos harmonicas ukuleles trumpets violins marshmallows jellybeans
gumdrops chestnuts hazelnuts peanuts avocados parsnips leeks goblets saucers teapots kettles ladders shovels
rakes wrenches sandals slippers umbrellas backpacks wallets purses helmets goggles scooters skateboards
canoes sleds yachts penguins ferrets llamas camels zebras otters beavers pelicans flamingos seahorses
walruses hedgehogs"""


def _unique(words: str) -> list[str]:
    return list(dict.fromkeys(words.split()))


def _people(she: str, he: str) -> list[tuple[str, str]]:
    return [(n, "She") for n in _unique(she)] + [(n, "He") for n in _unique(he)]


@dataclass(frozen=True)
class Vocabulary:
    """The names (with their pronoun) and plural items a problem is written with."""
    names: tuple[tuple[str, str], ...]
    items: tuple[str, ...]


CLASSIC = Vocabulary(tuple(_CLASSIC_NAMES), tuple(_CLASSIC_ITEMS))
OPEN = Vocabulary(tuple(_people(_SHE, _HE)), tuple(_unique(_ITEMS_OPEN)))  # train, val, test
HELD_OUT = Vocabulary(tuple(_people(_SHE_HELD_OUT, _HE_HELD_OUT)), tuple(_unique(_ITEMS_HELD_OUT)))  # unseen
_STEP = re.compile(r"^(\d+) ([+\-*]) (\d+) = (-?\d+)$")
_ANSWER = re.compile(r"The answer is (-?\d+)\.")


@dataclass(frozen=True)
class Problem:
    question: str  # the story, one line
    steps: tuple[str, ...]  # the reference solution, one `a op b = c` line per operation
    answer: int  # the value the (clean) reference reaches
    difficulty: int  # number of steps

    def solution(self) -> str:
        """The lines the model writes after the question (no trailing newline)."""
        return "\n".join(self.steps) + f"\n{ANSWER_PREFIX}{self.answer}."

    def text(self) -> str:
        return f"{prompt(self.question)}{self.solution()}"


def prompt(question: str) -> str:
    """What the model is given: the question line and a newline; it writes the steps."""
    return question + "\n"


def apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _operation(rng: random.Random, value: int) -> tuple[str, int]:
    """One feasible (op, operand) keeping the count in [0, MAX_VALUE]."""
    options = []
    if value + 10 <= MAX_VALUE:
        options.append("+")
    if value >= 10:
        options.append("-")
    if 2 <= value <= MAX_FACTOR_BASE:
        options.append("*")
    op = rng.choice(options)
    if op == "+":
        return op, rng.randint(2, min(199, MAX_VALUE - value))
    if op == "-":
        return op, rng.randint(2, min(199, value))
    return op, rng.randint(2, 9)


def _phrase(op: str, b: int) -> str:
    return {"+": f"gets {b} more", "-": f"gives away {b}", "*": f"multiplies them by {b}"}[op]


_QUESTION = re.compile(r"^\w+ has (\d+) [a-z]+\. (?:He|She) (.+)\. How many [a-z]+ now\?$")
_PHRASES = {re.compile(r"^gets (\d+) more$"): "+", re.compile(r"^gives away (\d+)$"): "-",
            re.compile(r"^multiplies them by (\d+)$"): "*"}


def parse_question(question: str) -> tuple[int, list[tuple[str, int]]] | None:
    """(start value, [(op, operand)]) of a question in tiny-math's form (the inverse of
    `make_problem`'s story), or None for any other text."""
    match = _QUESTION.match(question.strip())
    if not match:
        return None
    story = match.group(2)
    head, _, last = story.rpartition(", then ")
    ops = []
    for phrase in [*(head.split(", ") if head else []), last]:
        found = [(op, int(m.group(1))) for pattern, op in _PHRASES.items() if (m := pattern.match(phrase))]
        if not found:
            return None
        ops.append(found[0])
    return int(match.group(1)), ops


FORM = "NAME has N ITEMS. She (or He) gets N more, gives away N, ..., then multiplies them by N. How many ITEMS now?"
_SHAPE = re.compile(r"^(\S+) has (\S+) (\S+)\. (\S+) (.+)\. How many (\S+) now\?$")
_OPERATIONS = "'gets N more', 'gives away N' or 'multiplies them by N'"


def check_question(question: str) -> str | None:
    """None when `question` is in the form tiny-math was trained to read, else why not (one sentence,
    for the Scaling tab to show): one line `FORM`, a capitalised one-word name, a plural item in
    lowercase letters (the same one twice), 3-8 operations, a start count of 2-150, additions and
    subtractions of 2-199, multiplications by 2-9 of counts up to 99, every count in 0-999."""
    text = question.strip()
    if not text:
        return "the question is empty"
    if "\n" in text:
        return "tiny-math reads one question line; this text has several"
    match = _SHAPE.match(text)
    if not match:
        return f"tiny-math reads only questions of the form: {FORM}"
    name, start, item, pronoun, story, asked = match.groups()
    if not re.fullmatch(r"[A-Z][a-z]+", name):
        return f"the name {name!r} is not one capitalised word of plain letters (A-Z, a-z)"
    if not re.fullmatch(r"[a-z]+", item):
        return f"the item {item!r} is not one plural word in lowercase letters (a-z)"
    if asked != item:
        return f"the question counts {item!r} but asks how many {asked!r}"
    if pronoun not in ("He", "She"):
        return f"the second sentence starts with {pronoun!r}; tiny-math reads 'She' or 'He'"
    if not re.fullmatch(r"[1-9]\d*", start) or not MIN_START <= int(start) <= MAX_START:
        return f"the start count {start!r} is not a number from {MIN_START} to {MAX_START}"
    head, sep, last = story.rpartition(", then ")
    if not sep:
        return "the last operation must come after ', then '"
    phrases = [*(head.split(", ") if head else []), last]
    if not MIN_STEPS <= len(phrases) <= MAX_STEPS:
        return f"the story has {len(phrases)} operations; tiny-math reads {MIN_STEPS} to {MAX_STEPS}"
    value = int(start)
    for i, phrase in enumerate(phrases, 1):
        found = [(op, m.group(1)) for pattern, op in _PHRASES.items() if (m := pattern.match(phrase))]
        if not found:
            return f"operation {i}, {phrase!r}, is not {_OPERATIONS}"
        op, b = found[0]
        if not re.fullmatch(r"[1-9]\d*", b):
            return f"operation {i} has the number {b!r}; tiny-math reads numbers without leading zeros"
        b = int(b)
        if op == "*" and not (2 <= b <= 9 and 2 <= value <= MAX_FACTOR_BASE):
            return (f"operation {i} multiplies {value} by {b}; tiny-math multiplies only counts of 2 to "
                    f"{MAX_FACTOR_BASE}, by 2 to 9")
        if op != "*" and not 2 <= b <= 199:
            return f"operation {i} {'adds' if op == '+' else 'takes away'} {b}; tiny-math reads 2 to 199"
        value = apply(value, op, b)
        if not 0 <= value <= MAX_VALUE:
            return f"after operation {i} the count is {value}; tiny-math counts from 0 to {MAX_VALUE}"
    return None


def slip(value: int, rng: random.Random) -> int:
    """A nearby wrong value: one digit of `value` off by one (a slipped carry), never negative."""
    digits = len(str(value))
    while True:
        wrong = value + rng.choice((-1, 1)) * 10 ** rng.randrange(digits)
        if wrong >= 0 and wrong != value:
            return wrong


def make_problem(rng: random.Random, vocabulary: Vocabulary = OPEN) -> tuple[Problem, list[tuple[str, int]], int]:
    """A clean problem plus its (op, operand) list and start value (to replay with noise)."""
    name, pronoun = rng.choice(vocabulary.names)
    item = rng.choice(vocabulary.items)
    n = rng.randint(MIN_STEPS, MAX_STEPS)
    start = value = rng.randint(MIN_START, MAX_START)
    ops, steps = [], []
    for _ in range(n):
        op, b = _operation(rng, value)
        ops.append((op, b))
        new = apply(value, op, b)
        steps.append(f"{value} {op} {b} = {new}")
        value = new
    phrases = [_phrase(op, b) for op, b in ops]
    story = ", ".join(phrases[:-1]) + f", then {phrases[-1]}"
    question = f"{name} has {start} {item}. {pronoun} {story}. How many {item} now?"
    return Problem(question, tuple(steps), value, n), ops, start


def noisy_solution(ops: list[tuple[str, int]], start: int, rng: random.Random, rate: float = NOISE_RATE) -> str:
    """The solution with each result slipped w.p. `rate`; later steps continue from what was written.

    A draw whose chain would go negative (a slip down, then a subtraction) is drawn again."""
    while True:
        lines, value = [], start
        for op, b in ops:
            result = apply(value, op, b)
            if rng.random() < rate:
                result = slip(result, rng)
            lines.append(f"{value} {op} {b} = {result}")
            value = result
            if value < 0:
                break
        if value >= 0:
            return "\n".join(lines) + f"\n{ANSWER_PREFIX}{value}."


def _draw(rng: random.Random, vocabulary: Vocabulary, count: int, seen: set[str]) -> list:
    """`count` problems whose question texts are new to `seen` (which grows), with their ops and start."""
    out = []
    while len(out) < count:
        problem, ops, start = make_problem(rng, vocabulary)
        if problem.question not in seen:
            seen.add(problem.question)
            out.append((problem, ops, start))
    return out


def make_splits(seed: int = SEED, sizes: dict = SPLIT_SIZES, noise: float = NOISE_RATE) -> dict:
    """{"train": [(Problem, noisy text)], "val"/"test"/"open"/"unseen": [Problem]}, deterministic.

    val and test are the first tiny-math's held-out problems (its 10 names and 10 items, which the
    open lists include), drawn exactly as it drew them (val first, then test, from one stream, so
    `sizes` with val 0 gives val's first problems as test, as the Scaling tab's task menu and its
    presets have always had them); open is drawn from the training lists (`OPEN`), unseen only
    from `HELD_OUT`, whose names and items never occur in training; both are drawn in full
    (`SPLIT_SIZES`) and sliced, so they never depend on other sizes; train from `OPEN`. Held-out
    problems are drawn first; a training candidate whose question text equals a held-out one or an
    earlier training one is skipped, so held-out questions never occur in training. A split
    missing from `sizes` is empty.
    """
    for split in ("open", "unseen"):
        if sizes.get(split, 0) > SPLIT_SIZES[split]:
            raise ValueError(f"sizes[{split!r}] is {sizes[split]}; the {split} split holds at most {SPLIT_SIZES[split]}")
    seen: set[str] = set()
    classic = random.Random(seed)
    drawn = {"val": _draw(classic, CLASSIC, sizes.get("val", 0), seen)}
    drawn["test"] = _draw(classic, CLASSIC, sizes.get("test", 0), seen)
    rng = random.Random(f"tiny-math-open-{seed}")  # a str seed is hashed (sha512): the same on every run
    drawn["open"] = _draw(rng, OPEN, SPLIT_SIZES["open"], seen)
    drawn["unseen"] = _draw(rng, HELD_OUT, SPLIT_SIZES["unseen"], seen)
    out: dict = {split: [p for p, _, _ in drawn[split][: sizes.get(split, 0)]] for split in HELD_OUT_SPLITS}
    noise_rng = random.Random(seed + 1)
    out["train"] = [(p, prompt(p.question) + noisy_solution(ops, start, noise_rng, noise))
                    for p, ops, start in _draw(rng, OPEN, sizes.get("train", 0), seen)]
    return out


def write_splits(out: Path, seed: int = SEED, sizes: dict = SPLIT_SIZES) -> dict:
    """train.txt / val.txt (documents separated by a blank line, for `decoding.training.train --docs blocks`)
    and {train,val,test,open,unseen}.jsonl (question, reference steps, answer, difficulty)."""
    splits = make_splits(seed, sizes)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.txt").write_text("\n\n".join(text for _, text in splits["train"]) + "\n")
    (out / "val.txt").write_text("\n\n".join(p.text() for p in splits["val"]) + "\n")
    for split in ("train", *HELD_OUT_SPLITS):
        rows = [p for p, _ in splits[split]] if split == "train" else splits[split]
        with open(out / f"{split}.jsonl", "w") as f:
            for i, p in enumerate(rows):
                f.write(json.dumps({"id": i, **asdict(p)}) + "\n")
    return {split: len(rows) for split, rows in splits.items()}


# ---------------------------------------------------------------- grading


def parse_answer(text: str) -> int | None:
    match = _ANSWER.search(text)
    return int(match.group(1)) if match else None


def step_errors(text: str) -> tuple[int, int]:
    """(steps, steps whose arithmetic is wrong) among the `a op b = c` lines of `text`."""
    steps = wrong = 0
    for line in text.splitlines():
        match = _STEP.match(line.strip())
        if match:
            a, op, b, c = match.groups()
            steps += 1
            wrong += apply(int(a), op, int(b)) != int(c)
    return steps, wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decoding.scaling.math_tasks", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the splits here")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("--out is required to write the splits")
    print(json.dumps(write_splits(args.out, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
