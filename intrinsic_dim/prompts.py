"""Prompts: the paper's rendered templates (hard-coded as the official code renders them [C], not taken from
PromptSource), the split recipe of each dataset, and the zero-shot / ICL-k / unique-demo prompt builders [P]. Plain
Python, no I/O.

Every template maps one dataset row to (input, output). The strings sent to the model:
    combined  = input + "\\n" + output                                   (SFT training text, ICL demo)
    zero-shot = input + "\\n"                                            (also the SFT evaluation prompt)
    ICL-k     = "".join(demo.combined + "\\n\\n" for demo in demos) + input + "\\n"
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LETTERS = "ABCDE"


@dataclass(frozen=True)
class Recipe:
    """How a dataset is split [C]: shuffle every split with `seed`; train = the first n_train of `train`; eval = the
    first n_eval of `eval`, or items n_train.. of it when both come from the same split."""

    train: str
    eval: str
    seed: int


# ---- templates (the labels are the paper's verbalizers) ----------------------------------------------------------

def _sst2(r: dict, **_) -> tuple[str, str]:
    return f"{r['sentence']}\nQuestion: Was that sentence positive or negative? Answer:", \
        ["negative", "positive"][r["label"]]


def _rt_polarity(r: dict, **_) -> tuple[str, str]:  # SST-2's template on RT snippets: 0 rotten, 1 fresh
    return _sst2({"sentence": r["text"], "label": r["label"]})


def _cola(r: dict, **_) -> tuple[str, str]:
    return ("Does the following sentence make sense and use correct English? Please answer yes or no.\n"
            f"{r['sentence']}"), ["no", "yes"][r["label"]]


def _qnli(r: dict, **_) -> tuple[str, str]:  # GLUE: 0 entailment, 1 not_entailment
    return f"{r['sentence']}\nDoes that sentence have all you need to answer the question \"{r['question']}\"?", \
        ["yes", "no"][r["label"]]


def _qqp(r: dict, **_) -> tuple[str, str]:
    return ("I'm an administrator on the website Quora. There are two posts, one that asks "
            f"\"{r['question1']}\" and another that asks \"{r['question2']}\". I can merge questions if they are "
            "asking the same thing. Can I merge these two questions?"), ["no", "yes"][r["label"]]


def _mnli(r: dict, **_) -> tuple[str, str]:  # GLUE: 0 entailment, 1 neutral, 2 contradiction
    return f"{r['premise']} Are we justified in saying that \"{r['hypothesis']}\"? Yes, no, or maybe?", \
        ["Yes", "Maybe", "No"][r["label"]]


def _vitaminc(r: dict, **_) -> tuple[str, str]:  # MNLI's template: evidence as premise, claim as hypothesis
    return _mnli({"premise": r["evidence"], "hypothesis": r["claim"],
                  "label": [0, 2, 1][r["label"]]})  # supports -> Yes, refutes -> No, not enough info -> Maybe


def _ag_news(r: dict, **_) -> tuple[str, str]:
    return f"What label best describes this news article?\n{r['text']}", \
        ["World politics", "Sports", "Business", "Science and technology"][r["label"]]


def _csqa(r: dict, five_choices: bool = False, **_) -> tuple[str, str]:
    # the paper's template zips 4 letters with the 5 choices: option E is never shown, gold E stays
    n = 5 if five_choices else 4
    opts = "\n\n".join(f"- {lab}: {txt}" for lab, txt in zip(LETTERS[:n], r["choices"]["text"]))
    return ("Given the following options, what do you think is the correct answer to the question below:\n\n"
            f"{r['question']}\n\nOptions:\n\n{opts}"), r["answerKey"]


def _mmlu(r: dict, **_) -> tuple[str, str]:
    c = r["choices"]
    return f"{r['question']}\n\nA: {c[0]}\nB: {c[1]}\nC: {c[2]}\nD: {c[3]}\nAnswer:", LETTERS[r["answer"]]


TEMPLATES: dict[str, Callable[..., tuple[str, str]]] = {
    "sst2": _sst2, "cola": _cola, "qnli": _qnli, "qqp": _qqp, "mnli": _mnli, "ag-news": _ag_news,
    "commonsense-qa": _csqa, "mmlu": _mmlu,
    "rt-polarity": _rt_polarity, "vitaminc": _vitaminc,  # offline stand-ins (SST-2, MNLI templates)
}

# [C] sources and shuffle seeds; offline stand-ins use their own train/eval splits
RECIPES: dict[str, Recipe] = {
    "qnli": Recipe("train", "validation", 42), "commonsense-qa": Recipe("train", "train", 42),
    "mmlu": Recipe("test", "test", 50), "sst2": Recipe("train", "train", 42), "cola": Recipe("train", "train", 17),
    "ag-news": Recipe("train", "test", 42), "mnli": Recipe("train", "validation_matched", 42),
    "qqp": Recipe("train", "validation", 42),
    "rt-polarity": Recipe("train", "eval", 42), "vitaminc": Recipe("train", "eval", 42),
}


def template(task: str) -> Callable[..., tuple[str, str]]:
    if task not in TEMPLATES:
        raise KeyError(f"no intrinsic_dim prompt template for task {task!r}; templates exist for "
                       f"{', '.join(sorted(TEMPLATES))} (add one to intrinsic_dim/prompts.py TEMPLATES and RECIPES)")
    return TEMPLATES[task]


def render(task: str, rows: Sequence[dict], **kwargs) -> list[tuple[str, str]]:
    fn = template(task)
    return [fn(r, **kwargs) for r in rows]


def with_label_space(items: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each output with a leading space: "...Answer:\n positive", the token a BPE/SentencePiece LM predicts (ours)."""
    return [(i, " " + o) for i, o in items]


def combined(item: tuple[str, str]) -> str:
    return item[0] + "\n" + item[1]


def zero_shot(item: tuple[str, str]) -> str:
    return item[0] + "\n"


def icl(demos: Sequence[tuple[str, str]], query: tuple[str, str]) -> str:
    return "".join(combined(d) + "\n\n" for d in demos) + zero_shot(query)


def demo_indices(n_prompts: int, k: int, pool: int, seed: int = 42) -> list[list[int]]:
    """[C] random.seed(seed), then random.sample(range(pool), k) for each prompt: unique within a prompt, reused
    across prompts."""
    if k > pool:
        raise ValueError(f"k={k} demos per prompt but the pool has only {pool} items")
    rng = random.Random(seed)
    return [rng.sample(range(pool), k) for _ in range(n_prompts)]


def unique_demo_indices(n_prompts: int, k: int, pool: int, seed: int = 42) -> list[list[int]]:
    """The unique-demo control (App. D): no demo appears in more than one prompt (a shuffled pool, k per prompt)."""
    if n_prompts * k > pool:
        raise ValueError(f"unique demos need n_eval * k = {n_prompts * k} pool items but only {pool} exist; "
                         "lower method.n_eval or k, or raise method.unique_pool")
    order = list(range(pool))
    random.Random(seed).shuffle(order)
    return [order[i * k:(i + 1) * k] for i in range(n_prompts)]


def build(paradigm: str, k: int, evals: Sequence[tuple[str, str]], pool: Sequence[tuple[str, str]],
          seed: int = 42) -> list[str]:
    """The prompts of one ICL setting: paradigm 'icl' (demos from `pool`, reused) or 'icl_unique'."""
    if k == 0:
        return [zero_shot(q) for q in evals]
    pick = {"icl": demo_indices, "icl_unique": unique_demo_indices}[paradigm]
    idx = pick(len(evals), k, len(pool), seed)
    return [icl([pool[j] for j in row], q) for row, q in zip(idx, evals)]
