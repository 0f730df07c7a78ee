"""BLEU on detokenized text: a perfect hypothesis scores 100, an empty one 0; pieces are decoded first."""

import pytest

from normjax.train import bleu
from normjax.train.data_gettext import train_bpe

LINES = [
    "the file could not be opened",
    "cannot change owner of sequence",
    "a lot of buffers are being dropped",
    "line with unknown format",
    "takes a base backup of a running server",
] * 4


@pytest.fixture(scope="module")
def sp():
    return bleu.tokenizer(train_bpe(LINES, 60))


def test_perfect_and_empty_hypotheses_on_text():
    refs = LINES[:5]
    assert bleu.bleu(refs, refs) == pytest.approx(100.0)
    assert bleu.bleu([""] * 5, refs) == 0.0


def test_ids_and_pieces_are_detokenized(sp):
    refs = LINES[:5]
    ids = [sp.encode(r) for r in refs]
    pieces = [sp.encode(r, out_type=str) for r in refs]
    assert any(len(p) > len(r.split()) for p, r in zip(pieces, refs, strict=True))  # real subwords
    assert bleu.bleu(ids, ids, sp) == pytest.approx(100.0)
    assert bleu.bleu(pieces, refs, sp) == pytest.approx(100.0)
    assert bleu.bleu([[] for _ in refs], ids, sp) == 0.0
    # scored on text, not on pieces: BLEU over the pieces joined by spaces differs
    assert bleu.bleu([" ".join(p) for p in pieces], refs) < 100.0
    with pytest.raises(ValueError, match="2 hypotheses but 5 references"):
        bleu.bleu(refs[:2], refs)
