"""Deterministic, fixed-shape batches: bucketed translation pairs and contiguous LM chunks."""

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

from normjax.train.data_text import DataError
from normjax.train.vocab import BOS, EOS, PAD


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """How sequences become fixed-shape batches (one shape, hence one compile, per bucket)."""

    batch_size: int = 32  # sequences per batch (when max_tokens == 0)
    max_tokens: int = 0  # > 0: rows per batch = max_tokens // bucket length (a token budget)
    buckets: tuple[int, ...] = (32,)  # padded lengths; a sequence goes to the smallest that fits
    row_multiple: int = 1  # rows are rounded down to a multiple of this (the data-parallel device count)

    def rows(self, length: int) -> int:
        rows = self.max_tokens // length if self.max_tokens else self.batch_size
        return max(self.row_multiple, rows // self.row_multiple * self.row_multiple)


def epoch_permutation(seed: int, epoch: int, n: int, stream: int = 0) -> np.ndarray:
    """Epoch `epoch`'s order: a pure function of (seed, epoch, stream), so any position resumes."""
    return np.random.default_rng([seed, epoch, stream]).permutation(n)


class Seq2SeqBatches:
    """Translation pairs in bucketed batches; `batch(pos)` depends only on (seed, pos).

    Batch arrays (rows = spec.rows(L), L = bucket length): src, src_mask, tgt_in (bos + target),
    tgt_out (target + eos), tgt_mask; int32 / bool of shape (rows, L). The source ends with eos.
    Pairs longer than the largest bucket (or empty) are dropped; `num_dropped` counts them.
    """

    def __init__(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], spec: BatchSpec, seed: int = 0, shuffle: bool = True
    ):
        lengths = np.array([max(len(s), len(t)) + 1 for s, t in pairs], np.int64)
        nonempty = np.array([len(s) > 0 and len(t) > 0 for s, t in pairs], bool)
        keep = np.flatnonzero(nonempty & (lengths <= max(spec.buckets)))
        self.pairs = [pairs[i] for i in keep]
        self.kept = keep  # original index of each kept pair
        self.num_dropped = len(pairs) - len(keep)
        self.spec, self.seed, self.shuffle = spec, seed, shuffle
        self.buckets = tuple(sorted(spec.buckets))
        self.bucket_of = np.searchsorted(self.buckets, lengths[keep])
        self._cached_plan: tuple[int | None, list] = (None, [])
        self.batches_per_epoch = len(self._plan(0))
        if self.batches_per_epoch == 0:
            raise DataError(
                f"none of the {len(pairs)} sequence pairs fits config.data.max_len={max(spec.buckets)} "
                "(or every one is empty); raise config.data.max_len"
            )

    def _plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        if self._cached_plan[0] != epoch:
            self._cached_plan = (epoch, self._make_plan(epoch))
        return self._cached_plan[1]

    def _make_plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        n = len(self.pairs)
        order = epoch_permutation(self.seed, epoch, n) if self.shuffle else np.arange(n)
        plan = []
        for b, length in enumerate(self.buckets):
            idx = order[self.bucket_of[order] == b]
            rows = self.spec.rows(length)
            plan += [(length, idx[i : i + rows]) for i in range(0, len(idx), rows)]
        if self.shuffle:
            plan = [plan[i] for i in epoch_permutation(self.seed, epoch, len(plan), stream=1)]
        return plan

    def _collate(self, length: int, idx: np.ndarray) -> dict[str, np.ndarray]:
        rows = self.spec.rows(length)
        out = {k: np.full((rows, length), PAD, np.int32) for k in ("src", "tgt_in", "tgt_out")}
        for r, i in enumerate(idx):
            src, tgt = self.pairs[i]
            out["src"][r, : len(src) + 1] = np.append(src, EOS)
            out["tgt_in"][r, : len(tgt) + 1] = np.insert(tgt, 0, BOS)
            out["tgt_out"][r, : len(tgt) + 1] = np.append(tgt, EOS)
        out["src_mask"] = out["src"] != PAD
        out["tgt_mask"] = out["tgt_out"] != PAD
        return out

    def batch(self, pos: int) -> dict[str, np.ndarray]:
        """Batch number `pos` counted over all epochs."""
        epoch, i = divmod(pos, self.batches_per_epoch)
        return self._collate(*self._plan(epoch)[i])

    def epoch(self) -> Iterator[dict[str, np.ndarray]]:
        """Every batch of epoch 0 in order (for evaluation with shuffle=False)."""
        return (self.batch(i) for i in range(self.batches_per_epoch))

    def example_indices(self, pos: int) -> np.ndarray:
        return self._plan(pos // self.batches_per_epoch)[pos % self.batches_per_epoch][1]


class LMBatches:
    """Contiguous chunks of a token stream: tokens (rows, L), targets (the next tokens), mask.

    Training (shuffle=True) shifts the chunk grid by a per-epoch offset and shuffles the chunks; the
    number of full batches per epoch is fixed. Evaluation (shuffle=False) keeps the last partial
    batch, padded with masked rows.
    """

    def __init__(self, stream: np.ndarray, seq_len: int, spec: BatchSpec, seed: int = 0, shuffle: bool = True):
        if np.ndim(stream) != 1:
            raise DataError(f"an LM token stream must be 1-D, got shape {np.shape(stream)}")
        self.stream, self.seq_len, self.seed, self.shuffle = stream, seq_len, seed, shuffle
        self.rows = spec.rows(seq_len)
        self.num_chunks = (len(stream) - 1 - (seq_len if shuffle else 0)) // seq_len
        per_epoch = self.num_chunks // self.rows if shuffle else -(-self.num_chunks // self.rows)
        self.batches_per_epoch = per_epoch
        if per_epoch <= 0:
            raise DataError(
                f"the corpus split ({len(stream)} tokens) is shorter than one batch of {self.rows} x {seq_len} "
                "tokens; add text (config.data.path, config.data.max_bytes) or shrink the batch"
            )

    def batch(self, pos: int) -> dict[str, np.ndarray]:
        epoch, i = divmod(pos, self.batches_per_epoch)
        if self.shuffle:
            shift = int(np.random.default_rng([self.seed, epoch, 2]).integers(self.seq_len))
            chunks = epoch_permutation(self.seed, epoch, self.num_chunks)[i * self.rows : (i + 1) * self.rows]
        else:
            shift, chunks = 0, np.arange(i * self.rows, min((i + 1) * self.rows, self.num_chunks))
        window = np.arange(self.seq_len + 1)
        tokens = np.full((self.rows, self.seq_len + 1), PAD, np.int32)
        tokens[: len(chunks)] = self.stream[shift + chunks[:, None] * self.seq_len + window]
        mask = np.zeros((self.rows, self.seq_len), bool)
        mask[: len(chunks)] = True
        return {"tokens": tokens[:, :-1], "targets": tokens[:, 1:], "mask": mask}

    def epoch(self) -> Iterator[dict[str, np.ndarray]]:
        return (self.batch(i) for i in range(self.batches_per_epoch))
