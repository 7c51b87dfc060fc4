"""Open-ended chat prompts for the EAGLE head's self-distillation data (a seeded generator).

The head learns what SmolLM2-135M-Instruct itself writes, so the data is the target's own greedy
answers to varied requests: stories, explanations, descriptions, advice, letters, lists, poems,
comparisons. Prompts come from templates x subjects drawn with a fixed seed; the benchmark's
prompts (`HELD_OUT`) are never produced, so the speed-up is measured on requests the head never
saw answered.
"""

from __future__ import annotations

import random

TEMPLATES = (
    "Write a short story about {a}.",
    "Tell me a story in which {a} goes on an adventure.",
    "Explain how {b} works, in simple words.",
    "What is {b}? Explain it to a ten-year-old.",
    "Describe {a} in a few sentences.",
    "Give me five tips for {c}.",
    "How do I get better at {c}?",
    "Write a poem about {a}.",
    "Write a friendly letter to a friend about {c}.",
    "What are the advantages and disadvantages of {b}?",
    "Compare {b} and {b2}.",
    "Why is {b} important?",
    "Write a short blog post about {c}.",
    "List some interesting facts about {b}.",
    "Write a dialogue between {a} and {a2}.",
    "Describe a day in the life of {a}.",
    "What would happen if {b} disappeared?",
    "Give a step-by-step guide to {c}.",
    "Write a product description for {d}.",
    "Write a short speech about {c}.",
    "Summarise the history of {b}.",
    "What should a beginner know about {c}?",
    "Write a news report about {a} who {e}.",
    "Imagine {a} who {e}. What happens next?",
)
CHARACTERS = (
    "a lonely lighthouse keeper", "a curious cat", "a young wizard", "an old fisherman", "a brave knight",
    "a talking tree", "a lost puppy", "a clever fox", "a retired astronaut", "a shy dragon", "a busy baker",
    "a little girl named Mia", "a boy who loves trains", "a grumpy troll", "a kind nurse", "a travelling musician",
    "a detective in London", "a family of ducks", "a farmer and his goat", "a ghost in an old house",
    "a pirate captain", "a teacher on her first day", "a squirrel in winter", "a giant who is afraid of mice",
    "a small village by the sea", "a team of scientists", "an inventor", "a street artist", "a mountain climber",
    "a penguin in the desert", "a princess who wants to be a pilot", "a snowman", "a honey bee",
    "a young chess player", "a city at night", "a deep forest", "a time traveller", "a mail carrier",
)
TOPICS = (
    "photosynthesis", "the internet", "a rainbow", "the water cycle", "electricity", "gravity", "vaccines",
    "the moon", "volcanoes", "recycling", "democracy", "money", "a computer", "the human heart", "sleep",
    "the ocean", "climate change", "bees", "music", "the printing press", "solar energy", "chess", "coffee",
    "the Roman Empire", "earthquakes", "dinosaurs", "a car engine", "the immune system", "social media",
    "airplanes", "trees", "cloud computing", "the stock market", "bread", "the brain", "wind power",
    "libraries", "trains", "glaciers", "the Olympic Games", "mathematics", "the solar system", "batteries",
)
ACTIVITIES = (
    "learning a new language", "saving money", "staying healthy", "cooking at home", "studying for exams",
    "making friends in a new city", "running a marathon", "writing a novel", "growing vegetables", "public speaking",
    "taking better photos", "sleeping well", "working from home", "travelling on a budget", "learning to swim",
    "starting a small business", "playing the guitar", "reading more books", "keeping a journal", "painting",
    "camping in the mountains", "raising a puppy", "learning to code", "reducing stress", "planning a party",
    "cleaning the house", "riding a bike in the city", "preparing for a job interview", "baking bread",
)
PRODUCTS = (
    "a water bottle", "a pair of hiking boots", "a desk lamp", "a backpack", "a coffee mug", "a notebook",
    "an umbrella", "a wooden chair", "a bicycle helmet", "a teapot", "a winter coat", "a reading chair",
)
EVENTS = (
    "finds a hidden door", "wins a prize", "loses a map", "builds a machine", "discovers a secret",
    "meets a stranger", "plants a garden", "opens a shop", "rescues an animal", "learns to fly",
)
HELD_OUT = (  # the benchmark's open-ended prompts: never generated here
    "Write a short story about a robot who learns to paint.",
    "Explain why the sky is blue.",
    "Describe your ideal weekend.",
)


def make_prompt(rng: random.Random) -> str:
    """One request; never one of `HELD_OUT`."""
    while True:
        a, a2 = rng.sample(CHARACTERS, 2)
        b, b2 = rng.sample(TOPICS, 2)
        text = rng.choice(TEMPLATES).format(a=a, a2=a2, b=b, b2=b2, c=rng.choice(ACTIVITIES),
                                            d=rng.choice(PRODUCTS), e=rng.choice(EVENTS))
        if text not in HELD_OUT:
            return text[0].upper() + text[1:]


def prompts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [make_prompt(rng) for _ in range(count)]
