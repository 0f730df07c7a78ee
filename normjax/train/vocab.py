"""Token vocabularies: special tokens pad=0, bos=1, eos=2, unk=3, then words."""

import collections
import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


@dataclasses.dataclass(frozen=True)
class Vocab:
    """An id <-> token map; ids 0-3 are the specials."""

    tokens: tuple[str, ...]

    def __post_init__(self):
        if self.tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}")
        object.__setattr__(self, "_index", {t: i for i, t in enumerate(self.tokens)})

    @classmethod
    def from_words(cls, words: Iterable[str]) -> "Vocab":
        return cls(SPECIALS + tuple(words))

    @classmethod
    def from_corpus(cls, lines: Iterable[str], min_count: int = 1) -> "Vocab":
        """Words of whitespace-tokenized lines with count >= min_count, most frequent first."""
        counts = collections.Counter(w for line in lines for w in line.split())
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls.from_words(w for w, c in ranked if c >= min_count and w not in SPECIALS)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, line: str) -> np.ndarray:
        """Whitespace-split words to ids (unknown words -> UNK), no bos/eos."""
        return np.array([self._index.get(w, UNK) for w in line.split()], np.int32)

    def decode(self, ids: Sequence[int], strip_bpe: bool = False) -> str:
        """Ids up to the first eos, no specials, joined by spaces; optionally undoes `@@ ` BPE."""
        words = []
        for i in ids:
            if int(i) == EOS:
                break
            if int(i) >= len(SPECIALS):
                words.append(self.tokens[int(i)])
        text = " ".join(words)
        return text.replace("@@ ", "").removesuffix("@@") if strip_bpe else text
