"""Builds a run's data (train batches, validation batches, BLEU set) from its DataConfig."""

import dataclasses
import functools

import numpy as np
from absl import logging

from normjax.train import data_text
from normjax.train.batching import BatchSpec, LMBatches, Seq2SeqBatches
from normjax.train.config_io import DataConfig, gettext_spec
from normjax.train.data_synthetic import SyntheticSpec, make_synthetic
from normjax.train.vocab import EOS, SubwordVocab, Vocab


@dataclasses.dataclass
class Task:
    """kind "seq2seq" or "lm"; `train.batch(pos)` is batch number pos; `valid` is unshuffled."""

    kind: str
    vocab: Vocab | SubwordVocab
    train: Seq2SeqBatches | LMBatches
    valid: Seq2SeqBatches | LMBatches
    bleu: Seq2SeqBatches | None = None  # the first pairs of `bleu_split`, for greedy decoding
    references: list[str] | None = None  # raw reference lines by index in bleu_split (None: decode tgt ids)
    strip_bpe: bool = False
    max_len: int = 0  # longest padded target (the decoding length)
    bleu_split: str = "valid"  # BLEU is logged as f"{bleu_split}/bleu"
    record: dict | None = None  # what names the data (gettext: its manifest's sha256), for summary.json


@functools.lru_cache(maxsize=2)
def _parallel(data: DataConfig):
    if data.task == "synthetic":
        spec = SyntheticSpec(
            seed=data.synthetic_seed,
            num_train=data.num_train,
            num_valid=data.num_valid,
            num_test=data.num_test,
            max_len=data.max_len,
        )
        vocab, splits = make_synthetic(spec)
        return vocab, splits, None, None
    if data.task == "gettext":
        from normjax.train import data_gettext  # on use: see config_io.gettext_spec

        folder = data.path or data_gettext.cached_corpus(gettext_spec(data))
        return data_gettext.load_corpus(folder, data.src_lang, data.tgt_lang)
    return *data_text.load_parallel(data.path, data.src_lang, data.tgt_lang, data.min_count), None


@functools.lru_cache(maxsize=2)
def _bytes(data: DataConfig):
    return data_text.load_byte_corpus(data.path, data.suffix, data.max_bytes)


def load_task(data: DataConfig, batch: BatchSpec, seed: int, bleu_examples: int = 0) -> Task:
    """The task's batches; `seed` orders the training batches. Corpora are cached per DataConfig."""
    if data.task == "bytes_lm":
        stream = _bytes(data)
        return Task(
            "lm",
            data_text.byte_vocab(),
            LMBatches(stream["train"], data.seq_len, batch, seed),
            LMBatches(stream["valid"], data.seq_len, batch, shuffle=False),
            max_len=data.seq_len,
        )
    vocab, splits, refs, record = _parallel(data)
    batch = dataclasses.replace(batch, buckets=tuple(sorted(set(data.buckets) | {data.max_len})))
    valid = Seq2SeqBatches(splits["valid"], batch, shuffle=False)
    bleu, bleu_split = None, "test" if data.task == "gettext" else "valid"  # gettext: BLEU on held-out test
    if bleu_examples:
        bleu = Seq2SeqBatches(splits[bleu_split][:bleu_examples], batch, shuffle=False)
    train = Seq2SeqBatches(splits["train"], batch, seed)
    checked = [("train", train), ("valid", valid)] + ([(bleu_split, bleu)] if bleu and bleu_split != "valid" else [])
    for name, split in checked:
        if split.num_dropped:
            logging.warning(
                "data: %d of %d %s pairs are empty or longer than data.max_len=%d; skipped",
                split.num_dropped,
                len(split.pairs) + split.num_dropped,
                name,
                data.max_len,
            )
    return Task(
        kind="seq2seq",
        vocab=vocab,
        train=train,
        valid=valid,
        bleu=bleu,
        references=None if refs is None else refs[bleu_split],
        strip_bpe=data.task == "iwslt14",
        max_len=data.max_len,
        bleu_split=bleu_split,
        record=record,
    )


def unigram_nll(batches: Seq2SeqBatches | LMBatches) -> float:
    """Nats per target token when every target is predicted by the split's token frequencies.

    The cross-entropy of a model that ignores its input (the entropy of the unigram distribution): a
    loss curve that does not go below it has learnt nothing but frequencies. Targets are counted as the
    losses count them: the token stream (LM) or each target sentence plus its eos (translation).
    """
    if isinstance(batches, LMBatches):
        counts = np.bincount(np.asarray(batches.stream, np.int64).ravel())
    else:
        targets = [np.asarray(t, np.int64) for _, t in batches.pairs]
        counts = np.bincount(np.concatenate(targets + [np.full(len(targets), EOS, np.int64)]))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
