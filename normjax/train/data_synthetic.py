"""A synthetic translation task: grammar-generated sentences transduced through a random lexicon."""

import dataclasses
import functools
import itertools
import random

import numpy as np

from normjax.train.vocab import Vocab

# The source language is English-like (SVO, adjective before noun, prepositions); the target is
# built from the same parse tree with a random bilingual lexicon and these rules:
#   NP  det adj* noun PP?      ->  det'(det, number, gender(noun)) noun' [PL] adj'* (reversed) PP'?
#   PP  prep NP                ->  NP' prep'                                   (postpositions)
#   CL  subj verb obj? adv?    ->  subj' adv'? obj'? verb' [PL if subj plural]  (verb-final)
#   S   CL1 conj CL2           ->  CL1' conj' CL2', or CL2' conj' CL1' for "because"
# Some nouns translate to two target tokens (compounds). Words are Zipf-distributed within a class.

_DETS = (
    (0, (0, 1)),
    (1, (0,)),
    (2, (0,)),
    (3, (0,)),
    (4, (1,)),
    (5, (1,)),
    (6, (1,)),
)  # (det, numbers)
_CONJS = ("and", "but", "because")
_NUM_TARGET_DETS = 10


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """Sizes and seed of the synthetic task (hashable: the generated data is cached on it)."""

    seed: int = 0
    num_train: int = 50_000
    num_valid: int = 500
    num_test: int = 500
    num_nouns: int = 150
    num_adjectives: int = 50
    num_verbs: int = 60
    num_adverbs: int = 20
    num_prepositions: int = 12
    zipf_exponent: float = 1.1
    max_len: int = 40  # longest source or target sentence, counting its eos


@dataclasses.dataclass(frozen=True)
class _Lexicon:
    vocab: Vocab
    noun_target: tuple[tuple[int, ...], ...]
    noun_gender: tuple[int, ...]
    adj_target: tuple[int, ...]
    verb_target: tuple[int, ...]
    adv_target: tuple[int, ...]
    prep_target: tuple[int, ...]
    det_target: dict
    conj_target: tuple[int, ...]
    plural: int


def _build_lexicon(spec: SyntheticSpec) -> _Lexicon:
    rng = np.random.default_rng([spec.seed, 0])
    src = [f"d{i}" for i, _ in _DETS]
    src += [f"n{i}{s}" for i in range(spec.num_nouns) for s in ("", "s")]
    src += [f"a{i}" for i in range(spec.num_adjectives)]
    src += [f"v{i}{s}" for i in range(spec.num_verbs) for s in ("", "s")]
    src += [f"r{i}" for i in range(spec.num_adverbs)]
    src += [f"p{i}" for i in range(spec.num_prepositions)]
    src += list(_CONJS)
    num_target_nouns = spec.num_nouns + spec.num_nouns // 4
    tgt = [f"D{i}" for i in range(_NUM_TARGET_DETS)] + ["PL"]
    tgt += [f"N{i}" for i in range(num_target_nouns)]
    tgt += [f"A{i}" for i in range(spec.num_adjectives)]
    tgt += [f"V{i}" for i in range(spec.num_verbs)]
    tgt += [f"R{i}" for i in range(spec.num_adverbs)]
    tgt += [f"P{i}" for i in range(spec.num_prepositions)]
    tgt += [f"C{i}" for i in range(len(_CONJS))]
    vocab = Vocab.from_words(src + tgt)
    ids = lambda prefix, perm: tuple(vocab.encode(" ".join(f"{prefix}{int(j)}" for j in perm)))
    noun_perm = rng.permutation(num_target_nouns)
    compound = rng.random(spec.num_nouns) < 0.15
    extra = iter(noun_perm[spec.num_nouns :])
    noun_target = []
    for i in range(spec.num_nouns):
        words = [noun_perm[i]] + ([next(extra, noun_perm[(i + 1) % spec.num_nouns])] if compound[i] else [])
        noun_target.append(ids("N", words))
    det_table = rng.integers(0, _NUM_TARGET_DETS, size=(len(_DETS), 2, 2))
    det_target = {(d, n, g): ids("D", [det_table[d, n, g]])[0] for d, nums in _DETS for n in nums for g in (0, 1)}
    return _Lexicon(
        vocab=vocab,
        noun_target=tuple(noun_target),
        noun_gender=tuple(int(g) for g in rng.integers(0, 2, spec.num_nouns)),
        adj_target=ids("A", rng.permutation(spec.num_adjectives)),
        verb_target=ids("V", rng.permutation(spec.num_verbs)),
        adv_target=ids("R", rng.permutation(spec.num_adverbs)),
        prep_target=ids("P", rng.permutation(spec.num_prepositions)),
        det_target=det_target,
        conj_target=ids("C", rng.permutation(len(_CONJS))),
        plural=vocab.encode("PL")[0],
    )


class _Sampler:
    """Samples parse trees and realizes them in both languages as token ids."""

    def __init__(self, spec: SyntheticSpec, lex: _Lexicon, seed):
        self.spec, self.lex, self.rng = spec, lex, random.Random(seed)
        self.enc = lex.vocab.encode
        zipf = lambda n: list(itertools.accumulate((k + 1.0) ** -spec.zipf_exponent for k in range(n)))
        self.cum = {
            k: zipf(n)
            for k, n in (
                ("n", spec.num_nouns),
                ("a", spec.num_adjectives),
                ("v", spec.num_verbs),
                ("r", spec.num_adverbs),
                ("p", spec.num_prepositions),
            )
        }

    def pick(self, kind: str) -> int:
        return self.rng.choices(range(len(self.cum[kind])), cum_weights=self.cum[kind])[0]

    def noun_phrase(self, depth: int):
        """Returns (source ids, target ids, number) of a noun phrase."""
        r, lex = self.rng, self.lex
        number = int(r.random() < 0.35)
        det = r.choice([d for d, nums in _DETS if number in nums])
        num_adj = r.choices((0, 1, 2), weights=(0.45, 0.35, 0.2))[0]
        adjs = [self.pick("a") for _ in range(num_adj)]
        noun = self.pick("n")
        src = [self.enc(f"d{det}")[0]] + [self.enc(f"a{a}")[0] for a in adjs]
        src += [self.enc(f"n{noun}{'s' if number else ''}")[0]]
        tgt = [lex.det_target[det, number, lex.noun_gender[noun]], *lex.noun_target[noun]]
        tgt += [lex.plural] * number + [lex.adj_target[a] for a in reversed(adjs)]
        if r.random() < (0.25, 0.1, 0.0)[min(depth, 2)]:
            prep = self.pick("p")
            np_src, np_tgt, _ = self.noun_phrase(depth + 1)
            src += [self.enc(f"p{prep}")[0], *np_src]
            tgt += [*np_tgt, lex.prep_target[prep]]
        return src, tgt, number

    def clause(self):
        r, lex = self.rng, self.lex
        subj_src, subj_tgt, number = self.noun_phrase(0)
        verb = self.pick("v")
        src = subj_src + [self.enc(f"v{verb}{'' if number else 's'}")[0]]
        tgt = list(subj_tgt)
        if r.random() < 0.3:
            adv = self.pick("r")
            tgt.append(lex.adv_target[adv])
            adv_src = [self.enc(f"r{adv}")[0]]
        else:
            adv_src = []
        if r.random() < 0.6:
            obj_src, obj_tgt, _ = self.noun_phrase(0)
            src += obj_src
            tgt += obj_tgt
        src += adv_src
        tgt += [lex.verb_target[verb]] + [lex.plural] * number
        return src, tgt

    def sentence(self):
        src, tgt = self.clause()
        if self.rng.random() < 0.3:
            c = self.rng.randrange(len(_CONJS))
            src2, tgt2 = self.clause()
            conj = self.lex.conj_target[c]
            src = src + self.enc(_CONJS[c]).tolist() + src2
            tgt = (tgt2 + [conj] + tgt) if _CONJS[c] == "because" else (tgt + [conj] + tgt2)
        return src, tgt


@functools.lru_cache(maxsize=4)
def make_synthetic(spec: SyntheticSpec):
    """Generates the task deterministically from `spec` (cached per spec).

    Returns:
      (vocab, splits) with splits = {"train"|"valid"|"test": list of (src_ids, tgt_ids)}, int32
      arrays without bos/eos, each at most spec.max_len - 1 long (longer samples are redrawn).
    """
    lex = _build_lexicon(spec)
    splits = {}
    for index, (name, count) in enumerate(
        (("train", spec.num_train), ("valid", spec.num_valid), ("test", spec.num_test))
    ):
        sampler = _Sampler(spec, lex, seed=spec.seed * 1000 + index + 1)
        pairs = []
        while len(pairs) < count:
            src, tgt = sampler.sentence()
            if max(len(src), len(tgt)) < spec.max_len:
                pairs.append((np.asarray(src, np.int32), np.asarray(tgt, np.int32)))
        splits[name] = pairs
    return lex.vocab, splits
