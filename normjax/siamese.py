"""SiameseNorm (Li et al. 2026, arXiv 2602.08064): a Post-LN-like and a Pre-LN-like stream sharing every branch."""

from __future__ import annotations

from normjax.placements import DualStream


def siamese(s, xd, F, rec, gate):
    """One SiameseNorm sublayer on the pair (x, d): x' = N_x(x), u = N(x' + N_d(d)), x = x' + F(u) / sqrt(2 l),
    d = d + F(u); l = 1, 2, ... the block's position in its stack.

    `s.norm` is the branch's input norm N (its norm site `<sublayer>.pre`), `s.norm2` N_x, `s.norm3` N_d;
    `s.lns_scale` holds 1/sqrt(l). Qwen-Applications/SiameseNorm (commit 70efa00) `deit-model-siamesenorm.py`
    lines 204-211 (post_norm, pre_norm and input_norm per sublayer) and 216-226 (forward, c = sqrt(2 (index + 1))
    with index the block's from 0); `dit-model-siamesenorm.py` lines 123-134 (the same with adaLN).
    """
    if not isinstance(xd, DualStream):
        raise TypeError(f"a SiameseNorm sublayer maps a normjax.DualStream(x, d), got {type(xd).__name__}")
    x = s.norm2(xd.x)
    f = F(s.norm(rec("pre", x + s.norm3(xd.d))))
    return DualStream(x + f * (s.lns_scale[...].astype(f.dtype) * 2**-0.5), xd.d + f)
