"""Inference-time scaling: accuracy vs budget, in one run.

Default: held-out `tiny-math` problems (the test split of `decoding.scaling.math_tasks`, never
trained on), temperature 1 and no nucleus cut (the policy's own distribution, as its model card
measures pass@1), step reward `arith-step`. For every problem and budget N in --budgets:
  greedy          one greedy solution (the same at every N)
  best-of-n       the highest arith-step score among N samples (min over steps)
  majority-vote   the most frequent final answer among the same N samples
  weighted-vote   answers weighted by their arith-step scores, same samples
  oracle pass@N   some sample among the N is right (an upper bound, not a method)
  reward-beam     beam search over steps with the arith-step reward (beam_width 2; 1 at N = 1)
  particle-filter Puri et al. with the arith-step reward, multinomial resampling every step
  a-star          A*-decoding: N candidate steps per expansion, at most 16 expansions
  refine          review, refine, repeat (IAD): N samples, the best so far reviewed; its verified steps and the
                  checker's correction of its first bad step are forced into the next round; 3 rounds
                  (bench/bench_refine.py compares its feedback modes)
  compute-optimal per prompt (Snell et al.): a probe estimates the difficulty, the table fitted on val runs the
                  bin's method; N is the budget level (bench/bench_compute_optimal.py compares it with uniform)
  best-of-n, judge T=0.1 (R)        one of the same N samples drawn from softmax(score under R / 0.1): the
                                    expected accuracy of selection by a judge at a temperature (R: arith-step,
                                    or the misspecified arith-lastdigit)
  particle-filter, spare            the particle filter with the reference-guided step reward
  particle-filter, arith-lastdigit  ... with a checker blind to slipped carries (reward hacking)
  particle-filter, probe            ... with self-evaluation: the policy's own hidden state, read by a
                                    probe, predicts whether the solution will end right
  majority-vote, shortest half      Think Deep, Think Fast's length signal: only the shorter half of the
                                    complete samples vote (same samples)
  adaptive, arith-step              adaptive compute (Manvi et al. 2024) with the arithmetic checker as the
                                    evaluator: waves of 1, 2, 4, ... samples (N at most) until a complete one has
                                    no wrong step, the weaker half of each wave pruned after 2 steps; `samples`
                                    in the JSON: samples started per problem
  archon (found at B tokens)        the architecture Archon's search found for tiny-math at budget B
                                    (assets/tiny-math/archon.json): one run per problem, the same at every N
                                    (it has its own N), as greedy
  best-of-n, spare-prm              best-of-N's samples ranked by SPARE's trained PRM (min over steps), which
                                    reads no reference (`decoding.scaling.spare_prm`)
  particle-filter, spare-prm        the particle filter with that PRM as its step reward
  reward-beam, spare-prm            reward beam search with that PRM
  (the two ePF rows run only with --only ePF, and reward-beam with spare-prm only with --only spare-prm, to
  keep --quick near 15 minutes)
  particle-filter, ePF              entropic particle filtering: weights flattened to >= 70% of log N entropy
  particle-filter, ePF+LaM          ... plus look-ahead modulation: each weight also reflects the reward of one
                                    more sampled (and discarded) step; its tokens are counted
A problem counts as solved when the chosen answer equals the reference. Best-of-N, the votes and
pass@N read the first N samples of one N = max(budgets) run: every slot has its own random
stream, so slot i's sample is the same whatever N is, and the first N slots are exactly a run with
budget N. Tokens: generated tokens per problem (prompt excluded), summed over particles.

`--model smollm2-135m` runs the shipped SmolLM2 word problems instead (presets/tasks), plus the
throughput check: tokens/s of N particles decoded as one batch vs one by one (same generators,
same tokens, which is checked).

    python bench/bench_scaling.py --quick --json                  # 40 problems, N = 1..16 (~10 min)
    python bench/bench_scaling.py [--tasks 100] [--budgets 1,2,4,8,16,32] [--out F.json] [--png F.png]
    python bench/bench_scaling.py --model smollm2-135m [--tasks 20] [--max-new-tokens 96]
    python bench/bench_scaling.py --quick --skip-accuracy --sweep --json   # temperature / top-p sweep only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from decoding.scaling import rewards as rw
from decoding import run_to_trace
from decoding.events import stats
from decoding.lm import LM
from decoding.models import load_model
from decoding.scaling.particle_batch import ParticleBatch, slot_generators
from decoding.scaling.methods import shortest_share, vote
from decoding.scaling.run import best_complete
from decoding.scaling.tasks import load_tasks, task_prompt
from decoding.scaling import math_tasks
from decoding.scaling.spare_prm import SparePRMReward, solution_score

STEP = {"reward": "arith-step", "max_step_tokens": 40}


def correct(answer: str | None, reference: str) -> bool:
    value = rw.parse_number(answer) if answer is not None else None
    return value is not None and abs(value - float(reference)) < 1e-6


def answer_of(text: str, ended: bool) -> str | None:
    """As the scaling strategies read answers: no last-number guess for a text cut off at its cap."""
    answer = rw.extract_answer(text, last_number=ended)
    value = rw.parse_number(answer) if answer is not None else None
    return None if value is None else f"{value:g}"


def subset_choices(particles: list[dict], n: int) -> tuple[str | None, str | None]:
    """(best-of-n answer, majority-vote answer) from the first n particles of a run."""
    first = particles[:n]
    best = best_complete([p["score"] for p in first], [p["ended"] for p in first])  # the strategy's own rule
    votes = vote([p["answer"] for p in first], [1.0] * n)
    return first[best]["answer"], next(iter(votes), None)


def accuracy_rows(lm, tasks, budgets, max_new_tokens, seed, log) -> list[dict]:
    """SmolLM2's word problems (presets/tasks): greedy, best-of-N, vote, reward beam, particle filter."""
    tally, top = Tally(), max(budgets)
    for k, task in enumerate(tasks):
        prompt, ref = task_prompt(task["question"]), task["answer"]
        t0 = time.perf_counter()
        greedy = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=max_new_tokens)
        for n in budgets:
            tally.add("greedy", n, correct(answer_of(greedy.finish.text, greedy.finish.stop_reason == "eos"), ref),
                      len(greedy.finish.token_ids))
        sampled = run_to_trace(lm, prompt, strategy="best-of-n", params={"n": top, **STEP},
                               max_new_tokens=max_new_tokens, seed=seed + k)
        particles = sampled.finish.extra["particles"]
        for n in budgets:
            best, majority = subset_choices(particles, n)
            spent = sum(p["num_tokens"] for p in particles[:n])
            tally.add("best-of-n", n, correct(best, ref), spent)
            tally.add("majority-vote", n, correct(majority, ref), spent)
        for n in budgets:
            beam = run_to_trace(lm, prompt, strategy="reward-beam",
                                params={"n": n, "beam_width": 2 if n > 1 else 1, **STEP},
                                max_new_tokens=max_new_tokens, seed=seed + k)
            tally.add("reward-beam", n, correct(beam.finish.extra["answer"], ref), stats(beam)["tokens_spent"])
            particle = run_to_trace(lm, prompt, strategy="particle-filter", params={"n": n, **STEP},
                                    max_new_tokens=max_new_tokens, seed=seed + k)
            tally.add("particle-filter", n, correct(particle.finish.extra["answer"], ref),
                      stats(particle)["tokens_spent"])
        tally.count += 1
        log(f"task {k + 1}/{len(tasks)} ({time.perf_counter() - t0:.0f} s): "
            + ", ".join(f"{m} {tally.solved[(m, top)]}" for m in ("greedy", "best-of-n", "majority-vote",
                                                                   "reward-beam", "particle-filter")))
    return tally.rows()


METHODS = ("greedy", "best-of-n", "majority-vote", "weighted-vote", "oracle pass@N", "reward-beam",
           "particle-filter", "a-star", "refine", "compute-optimal", "particle-filter, spare",
           "particle-filter, arith-lastdigit", "particle-filter, probe", "best-of-n, spare-prm", "particle-filter, spare-prm",
           "reward-beam, spare-prm", "particle-filter, ePF", "particle-filter, ePF+LaM",
           "majority-vote, shortest half", "adaptive, arith-step")
SEARCHES = (("reward-beam", {}), ("particle-filter", {}), ("a-star", {"max_expansions": 16}), ("refine", {"rounds": 3}),
            ("compute-optimal", {}),
            ("particle-filter, spare", {"reward": "spare"}),
            ("particle-filter, arith-lastdigit", {"reward": "arith-lastdigit"}),
            ("particle-filter, probe", {"reward": "probe"}),
            ("particle-filter, spare-prm", {"reward": "spare-prm"}), ("reward-beam, spare-prm", {"reward": "spare-prm"}),
            ("particle-filter, ePF", {"entropic": 0.7}),
            ("particle-filter, ePF+LaM", {"entropic": 0.7, "lookahead": 1.0}),
            ("adaptive, arith-step", {"prune_after": 2}))  # one run per budget each
ON_REQUEST = {"particle-filter, ePF", "particle-filter, ePF+LaM",  # run only when --only names them (they would
              "reward-beam, spare-prm"}  # take --quick past its 15 minutes; the shipped JSON has the ePF rows)
MATH = {"reward": "arith-step", "temperature": 1.0, "top_p": 1.0, "max_step_tokens": 40}


class Tally:
    """Problems solved and tokens spent per (method, N), and per group of problems (`group`, set
    before a problem's results are added: tiny-math's difficulty bin)."""

    def __init__(self):
        self.solved, self.tokens, self.count, self.group, self.items = {}, {}, 0, None, {}
        self.samples: dict = {}  # (method, N) -> samples started per problem, for methods that stop early

    def add(self, method: str, n: int, ok: float, spent: float, samples: int | None = None) -> None:
        """`ok`: solved (True / False), or the probability that a random choice solves it."""
        self.solved[(method, n)] = self.solved.get((method, n), 0) + float(ok)
        self.tokens.setdefault((method, n), []).append(spent)
        self.items.setdefault((method, n), []).append((self.group, float(ok), spent))
        if samples is not None:
            self.samples.setdefault((method, n), []).append(samples)

    def rows(self) -> list[dict]:
        return [{"method": m, "budget": n, "accuracy": round(ok / self.count, 4),
                 "tokens": round(statistics.mean(self.tokens[(m, n)]), 1)}
                | ({"samples": round(statistics.mean(self.samples[(m, n)]), 2)} if (m, n) in self.samples else {})
                for (m, n), ok in self.solved.items()]

    def by_group(self) -> dict:
        """{group: {method: {N: accuracy}}}."""
        out: dict = {}
        for (m, n), items in self.items.items():
            for group in dict.fromkeys(g for g, _, _ in items):
                oks = [ok for g, ok, _ in items if g == group]
                out.setdefault(group, {}).setdefault(m, {})[str(n)] = round(sum(oks) / len(oks), 4)
        return out


DIFFICULTY_BINS = {3: "3-4 steps", 4: "3-4 steps", 5: "5-6 steps", 6: "5-6 steps", 7: "7-8 steps", 8: "7-8 steps"}


def compute_optimal(by_difficulty: dict, exclude=("oracle pass@N",)) -> dict:
    """{bin: {N: [best method, its accuracy]}}: which method wins at each budget, per difficulty bin
    (ties: the first in the table's order)."""
    out = {}
    for group, methods in by_difficulty.items():
        budgets = next(iter(methods.values())).keys()
        out[group] = {n: max(([m, row[n]] for m, row in methods.items() if m not in exclude and n in row),
                             key=lambda pair: pair[1]) for n in budgets}
    return out


JUDGE_T = 0.1
JUDGES = {"arith-step": rw.ArithmeticStepChecker(floor=0.05, ceiling=0.95, neutral=0.5),
          "arith-lastdigit": rw.LastDigitChecker(floor=0.05, ceiling=0.95, neutral=0.5)}


def judge_score(reward, prompt: str, text: str) -> float:
    """A finished sample's score under `reward`: the minimum over its lines (each line one step)."""
    lines = [line for line in text.splitlines() if line.strip()] or [""]
    return min(reward.score(prompt, lines[: i + 1], i == len(lines) - 1).value for i in range(len(lines)))


def judge_pick(scores: list[float], right: list[bool], ended: list[bool], temperature: float = JUDGE_T) -> float:
    """Probability that a draw from softmax(score / T) over the complete samples (all when none is)
    picks a right one: "selection by a judge at a temperature", computed exactly, not sampled."""
    pool = [i for i, e in enumerate(ended) if e] or list(range(len(scores)))
    weights = torch.softmax(torch.tensor([scores[i] / temperature for i in pool], dtype=torch.float64), 0)
    return float(sum(w for w, i in zip(weights, pool) if right[i]))


def math_rows(lm, problems, budgets, max_new_tokens, seed, log, only=()) -> list[dict]:
    """Every method at every budget on tiny-math problems (see the module docstring); `only`: run just
    the search methods whose name contains one of these words (the samples' columns always run)."""
    searches = [(name, extra) for name, extra in SEARCHES
                if any(word in name for word in only) or (not only and name not in ON_REQUEST)]
    tally, top = Tally(), max(budgets)
    archon = archon_row(lm, only)
    prm = SparePRMReward(lm)
    for k, problem in enumerate(problems):
        prompt, ref = math_tasks.prompt(problem.question), str(problem.answer)
        tally.group = DIFFICULTY_BINS.get(problem.difficulty, str(problem.difficulty))
        t0 = time.process_time()
        run = dict(max_new_tokens=max_new_tokens, chat=False, seed=seed + k)
        greedy = run_to_trace(lm, prompt, strategy="greedy", max_new_tokens=max_new_tokens, chat=False)
        greedy_ok = correct(answer_of(greedy.finish.text, greedy.finish.stop_reason == "eos"), ref)
        sampled = run_to_trace(lm, prompt, strategy="best-of-n", params={"n": top, **MATH}, **run)
        particles = sampled.finish.extra["particles"]
        judged = {name: [judge_score(reward, prompt, p["text"]) for p in particles] for name, reward in JUDGES.items()}
        by_prm = [solution_score(prm, prompt, p["text"]) for p in particles]  # SPARE-PRM, min over the steps
        for n in budgets:
            tally.add("greedy", n, greedy_ok, len(greedy.finish.token_ids))
            first = particles[:n]
            spent = sum(p["num_tokens"] for p in first)
            best, majority = subset_choices(particles, n)
            weighted = next(iter(vote([p["answer"] for p in first], [p["score"] for p in first])), None)
            tally.add("best-of-n", n, correct(best, ref), spent)
            tally.add("majority-vote", n, correct(majority, ref), spent)
            tally.add("weighted-vote", n, correct(weighted, ref), spent)
            voters = shortest_share([p["num_tokens"] for p in first], [i for i, p in enumerate(first) if p["ended"]],
                                    0.5)  # Think Deep, Think Fast's length signal: the shorter half votes
            short = next(iter(vote([p["answer"] if i in voters else None for i, p in enumerate(first)], [1.0] * n)),
                         None)
            tally.add("majority-vote, shortest half", n, correct(short, ref), spent)
            tally.add("oracle pass@N", n, any(correct(p["answer"], ref) for p in first if p["ended"]), spent)
            ranked = best_complete(by_prm[:n], [p["ended"] for p in first])
            tally.add("best-of-n, spare-prm", n, correct(first[ranked]["answer"], ref), spent)
            for reward, scores in judged.items():  # selection by a judge at a temperature (expected accuracy)
                tally.add(f"best-of-n, judge T={JUDGE_T:g} ({reward})", n,
                          judge_pick(scores[:n], [correct(p["answer"], ref) for p in first],
                                     [p["ended"] for p in first]), spent)
            for name, extra in searches:
                method = name.split(",")[0]
                extra = extra | ({"beam_width": 2 if n > 1 else 1} if method == "reward-beam" else {})
                trace = run_to_trace(lm, prompt, strategy=method, params={"n": n, **MATH, **extra}, **run)
                adaptive = trace.finish.extra.get("adaptive")
                tally.add(name, n, correct(trace.finish.extra["answer"], ref), stats(trace)["tokens_spent"],
                          adaptive["samples"] if adaptive else None)
        if archon:  # the found architecture has its own N: one run, the same at every N (as greedy)
            from decoding.scaling.archon_search import tokens_of

            trace = run_to_trace(lm, prompt, strategy="archon", params={"config": "found"}, **run)
            for n in budgets:
                tally.add(archon, n, correct(trace.finish.extra["answer"], ref), tokens_of(trace))
        tally.count += 1
        log(f"problem {k + 1}/{len(problems)} ({time.process_time() - t0:.0f} s CPU): solved at N={top}: "
            + ", ".join(f"{m} {tally.solved[(m, top)]}" for m in METHODS if (m, top) in tally.solved))
    return tally.rows(), tally.by_group()


def archon_row(lm, only=()) -> str | None:
    """The archon row's name, "archon (found at B tokens)", when the model has Archon's archon.json (and `only`
    names none or archon); else None."""
    from decoding.models import file_beside
    from decoding.scaling.archon_space import ARCHON_FILE

    path = file_beside(lm.loaded, ARCHON_FILE)
    if path is None or not path.exists():
        return None
    name = f"archon (found at {json.loads(path.read_text())['budget']:g} tokens)"
    return name if not only or any(word in name for word in only) else None


SWEEP = ((0.5, 1.0), (0.7, 1.0), (1.0, 1.0), (1.3, 1.0), (0.7, 0.9), (1.0, 0.9))  # (temperature, top_p)


def sweep_rows(lm, problems, budgets, max_new_tokens, seed, log) -> dict:
    """Best-of-N, majority vote and pass@N at each (temperature, top_p) of SWEEP: one run of max(budgets)
    samples per problem and setting, read at every N as in `math_rows`. {setting: {method: {N: accuracy}}}."""
    top, out = max(budgets), {}
    for temperature, top_p in SWEEP:
        name = f"T={temperature:g}, top_p={top_p:g}"
        solved: dict = {}
        t0 = time.process_time()
        for k, problem in enumerate(problems):
            prompt, ref = math_tasks.prompt(problem.question), str(problem.answer)
            params = {"n": top, **MATH, "temperature": temperature, "top_p": top_p}
            trace = run_to_trace(lm, prompt, strategy="best-of-n", params=params, max_new_tokens=max_new_tokens,
                                 chat=False, seed=seed + k)
            particles = trace.finish.extra["particles"]
            for n in budgets:
                best, majority = subset_choices(particles, n)
                for method, ok in (("best-of-n", correct(best, ref)), ("majority-vote", correct(majority, ref)),
                                   ("oracle pass@N", any(correct(p["answer"], ref) for p in particles[:n] if p["ended"]))):
                    solved.setdefault(method, {}).setdefault(str(n), 0)
                    solved[method][str(n)] += ok
        out[name] = {m: {n: round(v / len(problems), 4) for n, v in by_n.items()} for m, by_n in solved.items()}
        log(f"sweep {name} ({time.process_time() - t0:.0f} s CPU): " + ", ".join(
            f"{m} N={top} {out[name][m][str(top)]:.0%}" for m in out[name]))
    return out


def by_method(rows: list[dict], key: str) -> dict:
    """{method: {N: value}} from the rows (the --json shape)."""
    out: dict = {}
    for r in rows:
        out.setdefault(r["method"], {})[str(r["budget"])] = r[key]
    return out


def batched_vs_alone(lm, prompt, n, tokens, rounds, seed) -> dict:
    """Median tokens/s of n particles as one batch vs one at a time (same draws, same tokens)."""
    ids, _, _ = lm.encode_prompt(prompt)
    never = lambda new: False  # fixed-length steps: every particle makes `tokens` tokens
    ratios, batched_rates, alone_rates = [], [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        batch = ParticleBatch(lm, ids, slot_generators(seed + r, n), temperature=0.8, top_p=0.95)
        together = batch.extend(list(range(n)), never, [tokens] * n)
        t_batch = time.perf_counter() - t0
        t0 = time.perf_counter()
        single = []
        for i in range(n):
            one = ParticleBatch(lm, ids, [slot_generators(seed + r, n)[i]], temperature=0.8, top_p=0.95)
            single.append(one.extend([0], never, [tokens])[0])
        t_alone = time.perf_counter() - t0
        spent = sum(len(together[i][0]) for i in range(n))
        same = all(together[i][0] == single[i][0] for i in range(n))
        if not same:
            raise SystemExit("batched and one-by-one particles differ: the batch engine is wrong")
        batched_rates.append(spent / t_batch)
        alone_rates.append(spent / t_alone)
        ratios.append(t_alone / t_batch)
    return {"particles": n, "tokens_each": tokens, "batched_tok_s": round(statistics.median(batched_rates), 1),
            "one_by_one_tok_s": round(statistics.median(alone_rates), 1),
            "speedup": round(statistics.median(ratios), 2), "identical_tokens": True}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny-math", help="tiny-math (its held-out problems) or a model for the "
                                                              "shipped SmolLM2 word problems, e.g. smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tasks", type=int, default=None, help="problems (tiny-math 100, --quick 40; else 20)")
    parser.add_argument("--first-task", type=int, default=0)
    parser.add_argument("--budgets", default=None, help="tiny-math 1,2,4,8,16,32 (--quick 1,2,4,8,16); else 1,2,4,8,16")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="tiny-math 160; else 96")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="40 problems, N up to 16, no throughput check")
    parser.add_argument("--only", action="append", default=[],
                        help="tiny-math: run only the search methods whose name contains this (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    parser.add_argument("--sweep", action="store_true",
                        help="tiny-math: also best-of-N / vote / pass@N over temperatures and top-p (the 'sweep' key)")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--png", type=Path, help="also draw the budget curve to this PNG (headless Chromium)")
    parser.add_argument("--from-json", type=Path, nargs="*", help="only merge these --out files (split runs) and draw")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    math = args.model == "tiny-math"
    quick_budgets = "1,2,4,8,16"
    budgets = [int(b) for b in (args.budgets or (quick_budgets if args.quick or not math else quick_budgets + ",32"))
               .split(",")]
    count = args.tasks or (40 if args.quick else 100 if math else 20)
    max_new_tokens = args.max_new_tokens or (math_tasks_max_tokens() if math else 96)
    if args.from_json:
        result = merge([json.loads(path.read_text()) for path in args.from_json])
        report(result, args)
        return
    lm = LM(load_model(args.model, dtype=args.dtype, progress=None))
    log = lambda message: print(message, file=sys.stderr, flush=True)
    result = {"model": args.model, "dtype": args.dtype, "tasks": count, "first_task": args.first_task,
              "budgets": budgets, "max_new_tokens": max_new_tokens, "seed": args.seed}
    t0 = time.time()
    if not args.skip_accuracy and math:
        problems = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"]
        problems = problems[args.first_task:args.first_task + count]
        result |= {"problems": "tiny-math held-out test split", "sampling": MATH}
        result["rows"], result["by_difficulty"] = math_rows(lm, problems, budgets, max_new_tokens, args.seed, log,
                                                            tuple(args.only))
        result["compute_optimal"] = compute_optimal(result["by_difficulty"])
    if args.sweep and math:
        problems = math_tasks.make_splits(sizes={**math_tasks.SPLIT_SIZES, "train": 0})["test"]
        result["sweep"] = sweep_rows(lm, problems[args.first_task:args.first_task + count], budgets, max_new_tokens,
                                     args.seed, log)
    if not args.skip_accuracy and not math:  # SmolLM2's word problems (tiny-math reads only its own form)
        tasks = load_tasks()[args.first_task:args.first_task + count]
        result["tasks"] = len(tasks)
        result["rows"] = accuracy_rows(lm, tasks, budgets, max_new_tokens, args.seed, log)
    if "rows" in result:
        result["accuracy"], result["tokens"] = by_method(result["rows"], "accuracy"), by_method(result["rows"], "tokens")
        result["samples"] = by_method([r for r in result["rows"] if "samples" in r], "samples")
    if not (args.skip_throughput or args.quick or math):
        sizes = sorted({min(n, max(budgets)) for n in (4, 16)})  # (4, 16) unless --budgets stops lower (smoke runs)
        result["throughput"] = [batched_vs_alone(lm, task_prompt(load_tasks()[0]["question"]), n,
                                                 min(32, max_new_tokens), 3, args.seed) for n in sizes]
    result["seconds"] = round(time.time() - t0, 1)
    report(result, args)


def math_tasks_max_tokens() -> int:
    from decoding.scaling.math_eval import MAX_NEW_TOKENS

    return MAX_NEW_TOKENS


def report(result: dict, args) -> None:
    """The table (or --json's one object), then --out and --png."""
    if args.json:
        print(json.dumps(result))
    else:
        if "rows" in result:
            print_table(result)
            print_compute_optimal(result)
        for setting, table in result.get("sweep", {}).items():
            print(f"{setting}: " + "; ".join(f"{m} " + " ".join(f"N={n} {v:.0%}" for n, v in by_n.items())
                                              for m, by_n in table.items()))
        for row in result.get("throughput", []):
            print(f"N={row['particles']}: batched {row['batched_tok_s']} tok/s, one by one "
                  f"{row['one_by_one_tok_s']} tok/s, {row['speedup']}x (identical tokens)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    if args.png and "rows" in result:
        draw(result["rows"], args.png)


def merge(parts: list[dict]) -> dict:
    """One result from runs over disjoint task ranges: accuracies and tokens weighted by task count."""
    total = sum(p["tasks"] for p in parts)
    rows = {}
    for part in parts:
        for r in part["rows"]:
            key = (r["method"], r["budget"])
            acc = rows.setdefault(key, {"method": r["method"], "budget": r["budget"], "accuracy": 0.0, "tokens": 0.0})
            acc["accuracy"] += r["accuracy"] * part["tasks"] / total
            acc["tokens"] += r["tokens"] * part["tasks"] / total
    merged = {k: v for k, v in parts[0].items() if k not in ("rows", "accuracy", "tokens", "throughput", "first_task")}
    merged["tasks"] = total
    merged["rows"] = [v | {"accuracy": round(v["accuracy"], 4), "tokens": round(v["tokens"], 1)} for v in rows.values()]
    merged["accuracy"], merged["tokens"] = by_method(merged["rows"], "accuracy"), by_method(merged["rows"], "tokens")
    merged["throughput"] = [t for p in parts for t in p.get("throughput", [])]
    return merged


def print_compute_optimal(result: dict) -> None:
    """Which method wins at each budget, per difficulty bin (the oracle left out)."""
    if "compute_optimal" not in result:
        return
    budgets = result["budgets"]
    print("\nbest method per budget and difficulty (accuracy)")
    print(f"{'difficulty':<12}" + "".join(f"N={n:<30}" for n in budgets))
    for group in sorted(result["compute_optimal"]):
        cells = result["compute_optimal"][group]
        print(f"{group:<12}" + "".join(f"{cells[str(n)][0]} {cells[str(n)][1]:.0%}".ljust(32) for n in budgets))


def print_table(result: dict) -> None:
    budgets = result["budgets"]
    print(f"\naccuracy on {result['tasks']} tasks (mean tokens spent)")
    print(f"{'method':<42}" + "".join(f"N={n:<13}" for n in budgets))
    for method in dict.fromkeys(r["method"] for r in result["rows"]):
        cells = {r["budget"]: r for r in result["rows"] if r["method"] == method}
        print(f"{method:<42}" + "".join(f"{cells[n]['accuracy']:<5.0%}({cells[n]['tokens']:<6.0f}) " for n in budgets))


def draw(rows: list[dict], png: Path) -> None:
    """The budget curve as a PNG, drawn by plotly.js in headless Chromium (no kaleido needed)."""
    import shutil
    import tempfile

    from playwright.sync_api import sync_playwright

    from visualizers import figure_to_html
    from visualizers.particles import budget_figure

    fig = budget_figure(rows)
    fig.update_layout(width=900, height=480)
    page_file = Path(tempfile.mkdtemp()) / "budget.html"
    page_file.write_text(figure_to_html(fig))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 920, "height": 500})
        page.goto(page_file.as_uri())
        page.wait_for_selector(".main-svg")
        page.locator(".plotly").first.screenshot(path=str(png))
        browser.close()
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
