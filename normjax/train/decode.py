"""Greedy decoding for encoder-decoder models (recomputes the decoder each step) and corpus BLEU."""

import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu
from flax import nnx

from normjax.train.vocab import BOS, EOS, PAD, Vocab


def greedy_decode(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    consts: nnx.State,
    src_BS: jax.Array,
    src_mask_BS: jax.Array,
    max_len: int,
) -> jax.Array:
    """Greedy translation of a batch, at most `max_len` tokens (eos included), padded after eos.

    No KV cache: step t re-runs `model.decode` on the whole prefix, which is simple and, jitted once
    with a fixed max_len, fast enough for evaluation-sized batches.

    Returns:
      int32 (B, max_len) target ids without the leading bos.
    """
    model = nnx.merge(graphdef, params, consts)
    memory_BSD = model.encode(src_BS, src_mask=src_mask_BS)
    B = src_BS.shape[0]
    tgt_BT = jnp.full((B, max_len), PAD, jnp.int32).at[:, 0].set(BOS)  # decoder input (bos + outputs)
    out_BT = jnp.full((B, max_len), PAD, jnp.int32)

    def body(t, carry):
        tgt_BT, out_BT, done_B = carry
        logits_BTV = model.decode(tgt_BT, memory_BSD, src_mask=src_mask_BS)
        next_B = jnp.argmax(logits_BTV[:, t], axis=-1).astype(jnp.int32)
        next_B = jnp.where(done_B, PAD, next_B)
        tgt_BT = tgt_BT.at[:, jnp.minimum(t + 1, max_len - 1)].set(next_B)
        return tgt_BT, out_BT.at[:, t].set(next_B), done_B | (next_B == EOS)

    _, out_BT, _ = jax.lax.fori_loop(0, max_len, body, (tgt_BT, out_BT, jnp.zeros((B,), bool)))
    return out_BT


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """sacrebleu corpus BLEU (13a tokenization) of detokenized lines."""
    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


def translate(decode_fn, params, consts, batcher, vocab: Vocab, references=None, strip_bpe=False):
    """(hypotheses, references) over every batch of an unshuffled Seq2SeqBatches.

    Args:
      decode_fn: `(params, consts, src, src_mask) -> ids`, a jitted `greedy_decode` with graphdef
        and max_len bound.
      references: raw reference lines by original example index (BPE undone, unknown words intact);
        None decodes the references from the target ids.
    """
    hyps, refs = [], []
    for pos in range(batcher.batches_per_epoch):
        batch = batcher.batch(pos)
        out_BT = np.asarray(decode_fn(params, consts, batch["src"], batch["src_mask"]))
        for row, example in enumerate(batcher.example_indices(pos)):
            hyps.append(vocab.decode(out_BT[row], strip_bpe=strip_bpe))
            if references is None:
                refs.append(vocab.decode(batch["tgt_out"][row], strip_bpe=strip_bpe))
            else:
                refs.append(references[batcher.kept[example]])
    return hyps, refs
