"""experiments/provenance.py and memo.py: what a run read reaches its record, also when a sweep's later run takes a
memoised value instead of reading again."""
from experiments.memo import Memo
from experiments.provenance import note_asset, note_tokenizer, recording


def test_notes_reach_every_open_recording_and_none_after():
    with recording() as outer:
        note_asset("models/a", "1")
        with recording() as inner:
            note_asset("data/b", "2")
    note_asset("models/c", "3")  # no run open: noted nowhere
    assert outer.assets == {"models/a": "1", "data/b": "2"} and inner.assets == {"data/b": "2"}


def test_a_memo_hit_notes_again_what_its_computation_read():
    memo, tok = Memo(2), object()

    def load():
        note_asset("models/bert", "abc")
        note_tokenizer(tok)
        return "backbone"
    with recording() as first:
        assert memo("k", load) == "backbone"
    with recording() as second:  # the next run of the sweep: load() is not called again
        assert memo("k", lambda: 1 / 0) == "backbone"
    assert first.assets == second.assets == {"models/bert": "abc"}
    assert second.tokenizers == [tok]


def test_the_first_tokenizer_is_the_records_and_each_is_noted_once():
    from experiments.models import byte_tokenizer, tokenizer_fingerprint
    with recording() as reads:
        tok = byte_tokenizer()
        note_tokenizer(tok)
        byte_tokenizer()
    assert len(reads.tokenizers) == 2 and reads.tokenizer_fingerprint() == tokenizer_fingerprint(tok)
