"""The unigram level: the entropy of the targets' token frequencies, counted as the losses count them."""

import math

import numpy as np
import pytest

from normjax.train.batching import BatchSpec, LMBatches, Seq2SeqBatches
from normjax.train.tasks import unigram_nll
from normjax.train.vocab import EOS


def test_uniform_stream_is_log_of_the_alphabet():
    stream = np.tile(np.arange(7, dtype=np.int32), 40)  # 7 symbols, equally often
    assert unigram_nll(LMBatches(stream, 8, BatchSpec(batch_size=2))) == pytest.approx(math.log(7))


def test_translation_targets_count_one_eos_per_sentence():
    a, b = EOS + 1, EOS + 2
    pairs = [([a, b], [a, a, b]), ([b], [a])]  # targets + eos: a a b eos, a eos -> a 3, b 1, eos 2
    p = np.array([3, 1, 2]) / 6
    got = unigram_nll(Seq2SeqBatches(pairs, BatchSpec(batch_size=2, buckets=(8,))))
    assert got == pytest.approx(-(p * np.log(p)).sum())
