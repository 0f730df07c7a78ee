"""Corpus BLEU (sacrebleu) of sentencepiece-tokenized translations, scored on detokenized text."""

from collections.abc import Sequence

import sentencepiece as spm

from normjax.train.decode import corpus_bleu


def tokenizer(model: str | bytes) -> spm.SentencePieceProcessor:
    """A sentencepiece model from a file path or its serialized bytes (data_gettext's spm.model)."""
    if isinstance(model, bytes):
        return spm.SentencePieceProcessor(model_proto=model)
    return spm.SentencePieceProcessor(model_file=model)


def detokenize(sp: spm.SentencePieceProcessor, tokens: Sequence[int] | Sequence[str] | str) -> str:
    """Text of one sentence given as ids or pieces (a str is taken as detokenized already)."""
    if isinstance(tokens, str):
        return tokens
    return sp.decode([int(t) for t in tokens] if tokens and not isinstance(tokens[0], str) else list(tokens))


def bleu(hypotheses: Sequence, references: Sequence, sp: spm.SentencePieceProcessor | None = None) -> float:
    """sacrebleu corpus BLEU (13a) of hypotheses against one reference each, 0-100.

    Args:
      hypotheses, references: sentences as text, or (with `sp`) as sentencepiece ids or pieces, which are
        decoded first: BLEU is scored on detokenized text, never on subword pieces.
      sp: the sentencepiece model that tokenized them.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if sp is not None:
        hypotheses = [detokenize(sp, h) for h in hypotheses]
        references = [detokenize(sp, r) for r in references]
    return corpus_bleu(list(hypotheses), list(references))
