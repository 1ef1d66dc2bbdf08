"""The prompt builder reproduces the paper's rendered strings and its demo sampling [P, C]."""
import random

import pytest

from intrinsic_dim import prompts

ROWS = {
    "qnli": ({"question": "Who wrote it?", "sentence": "It was written by Ann.", "label": 0},
             'It was written by Ann.\nDoes that sentence have all you need to answer the question "Who wrote it?"?',
             "yes"),
    "sst2": ({"sentence": "a gorgeous film ", "label": 1},
             "a gorgeous film \nQuestion: Was that sentence positive or negative? Answer:", "positive"),
    "rt-polarity": ({"text": "dull.", "label": 0},
                    "dull.\nQuestion: Was that sentence positive or negative? Answer:", "negative"),
    "cola": ({"sentence": "Him went.", "label": 0},
             "Does the following sentence make sense and use correct English? Please answer yes or no.\nHim went.",
             "no"),
    "ag-news": ({"text": "Stocks fell.", "label": 3},
                "What label best describes this news article?\nStocks fell.", "Science and technology"),
    "mnli": ({"premise": "A man sleeps.", "hypothesis": "A man rests.", "label": 1},
             'A man sleeps. Are we justified in saying that "A man rests."? Yes, no, or maybe?', "Maybe"),
    "vitaminc": ({"claim": "X is big.", "evidence": "X is small.", "label": 1},
                 'X is small. Are we justified in saying that "X is big."? Yes, no, or maybe?', "No"),
    "qqp": ({"question1": "How to cook?", "question2": "How do I cook?", "label": 1},
            "I'm an administrator on the website Quora. There are two posts, one that asks \"How to cook?\" and "
            "another that asks \"How do I cook?\". I can merge questions if they are asking the same thing. Can I "
            "merge these two questions?", "yes"),
    "mmlu": ({"question": "2+2=?", "choices": ["1", "2", "3", "4"], "answer": 3},
             "2+2=?\n\nA: 1\nB: 2\nC: 3\nD: 4\nAnswer:", "D"),
    "commonsense-qa": ({"question": "Where is a fish?", "answerKey": "E",
                        "choices": {"label": list("ABCDE"), "text": ["tree", "sky", "car", "desk", "sea"]}},
                       "Given the following options, what do you think is the correct answer to the question below:"
                       "\n\nWhere is a fish?\n\nOptions:\n\n- A: tree\n\n- B: sky\n\n- C: car\n\n- D: desk", "E"),
}


@pytest.mark.parametrize("task", sorted(ROWS))
def test_templates_render_the_papers_strings(task):
    row, inp, out = ROWS[task]
    assert prompts.template(task)(row) == (inp, out)
    assert prompts.combined((inp, out)) == inp + "\n" + out
    assert prompts.zero_shot((inp, out)) == inp + "\n"


def test_every_template_has_a_recipe_and_the_papers_seeds():
    assert set(prompts.TEMPLATES) == set(prompts.RECIPES)
    seeds = {name: prompts.RECIPES[name].seed for name in ("mmlu", "cola", "qnli")}
    assert seeds == {"mmlu": 50, "cola": 17, "qnli": 42}
    assert prompts.RECIPES["ag-news"].eval == "test" and prompts.RECIPES["sst2"].eval == "train"


def test_csqa_option_e_only_on_request():
    row = ROWS["commonsense-qa"][0]
    assert "- E:" not in prompts.template("commonsense-qa")(row)[0]
    assert prompts.template("commonsense-qa")(row, five_choices=True)[0].endswith("- D: desk\n\n- E: sea")


def test_icl_prompt_assembly():
    demos = [("d1", "a"), ("d2", "b")]
    assert prompts.icl(demos, ("q", "x")) == "d1\na\n\nd2\nb\n\nq\n"
    built = prompts.build("icl", 0, [("q", "x")], demos)
    assert built == ["q\n"]


def test_demo_sampling_matches_the_official_code():
    random.seed(42)
    expected = [random.sample(range(1000), 5) for _ in range(20)]
    assert prompts.demo_indices(20, 5, 1000, seed=42) == expected
    assert all(len(set(row)) == 5 for row in expected)


def test_unique_demos_are_never_reused():
    idx = prompts.unique_demo_indices(50, 4, 300, seed=1)
    flat = [i for row in idx for i in row]
    assert len(flat) == len(set(flat)) == 200
    with pytest.raises(ValueError, match="unique_pool"):
        prompts.unique_demo_indices(100, 4, 300)


def test_unknown_task_names_the_fix():
    with pytest.raises(KeyError, match="TEMPLATES"):
        prompts.template("wnut16")
