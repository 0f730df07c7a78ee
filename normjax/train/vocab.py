"""Token vocabularies: special tokens pad=0, bos=1, eos=2, unk=3, then words (or sentencepiece pieces)."""

import collections
import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np
import sentencepiece as spm

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


def content_ids(ids: Sequence[int]) -> list[int]:
    """The ids before the first eos, specials left out."""
    out = []
    for i in ids:
        if int(i) == EOS:
            break
        if int(i) >= len(SPECIALS):
            out.append(int(i))
    return out


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
        text = " ".join(self.tokens[i] for i in content_ids(ids))
        return text.replace("@@ ", "").removesuffix("@@") if strip_bpe else text


class SubwordVocab:
    """A sentencepiece model (serialized bytes) as a vocabulary: text in, ids out, detokenized text back.

    Its ids must be normjax's specials (pad 0, bos 1, eos 2, unk 3), as `data_gettext.train_bpe` makes them.
    """

    def __init__(self, model: bytes):
        self.sp = spm.SentencePieceProcessor(model_proto=model)
        ids = (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.unk_id())
        if ids != (PAD, BOS, EOS, UNK):
            raise ValueError(f"the sentencepiece model's pad/bos/eos/unk ids are {ids}, not {(PAD, BOS, EOS, UNK)}")

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, line: str) -> np.ndarray:
        """Subword ids of one line, no bos/eos."""
        return np.array(self.sp.encode(line), np.int32)

    def encode_all(self, lines: Sequence[str]) -> list[list[int]]:
        """Subword ids of many lines at once (sentencepiece's batch encoder)."""
        return self.sp.encode(list(lines))

    def decode(self, ids: Sequence[int], strip_bpe: bool = False) -> str:
        """Detokenized text of the ids up to the first eos, without specials (unk included, as Vocab.decode);
        `strip_bpe` is ignored: sentencepiece's decoder undoes its own subwords."""
        return self.sp.decode(content_ids(ids))
