"""Local text corpora: a byte-level LM corpus from a directory and IWSLT14-style parallel files."""

import hashlib
import os
import pathlib
import platform
import sysconfig

import numpy as np

from normjax.io import write_bytes
from normjax.train.vocab import SPECIALS, Vocab

BYTE_OFFSET = len(SPECIALS)  # byte b has id b + BYTE_OFFSET
IWSLT_FILES = tuple(f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("de", "en"))


class DataError(ValueError):
    """Data that cannot be trained on; the message names the folder, file or setting."""


BYTE_CORPUS_ENV = "NORMJAX_BYTE_CORPUS"  # a folder standing in for the stdlib (a copy carried to another machine)


def stdlib_dir() -> str:
    """The Python standard library's source directory."""
    return sysconfig.get_paths().get("stdlib") or os.path.dirname(os.__file__)


def default_byte_dir() -> str:
    """The byte-LM corpus when config.data.path is empty: $NORMJAX_BYTE_CORPUS, else this Python's stdlib
    (`scripts/accelerator_check.sh --prepare=DIR` copies the bytes the runs read, so a machine with another
    Python reads the same ones; each result records their sha256)."""
    return os.environ.get(BYTE_CORPUS_ENV) or stdlib_dir()


def byte_vocab() -> Vocab:
    return Vocab.from_words(f"<0x{b:02x}>" for b in range(256))


def _corpus_files(directory: str, suffix: str) -> list[pathlib.Path]:
    root = pathlib.Path(directory)
    skip = ("site-packages", "test", "tests", "idlelib", "__pycache__")
    return sorted(p for p in root.rglob(f"*{suffix}") if p.is_file() and not set(p.relative_to(root).parts) & set(skip))


def _read_corpus(root: str, suffix: str, max_bytes: int):
    """(file, bytes used) in sorted path order, streamed: at most max_bytes in all, the last file cut short."""
    left = max_bytes
    for path in _corpus_files(root, suffix):
        if left <= 0:
            return
        with open(path, "rb") as f:
            data = f.read(left)
        left -= len(data)
        yield path, data


def _checked_root(directory: str, suffix: str) -> str:
    root = directory or default_byte_dir()
    if not os.path.isdir(root):
        where = f"${BYTE_CORPUS_ENV}" if not directory and os.environ.get(BYTE_CORPUS_ENV) else "config.data.path"
        raise DataError(f"{where}={root!r} is not a folder")
    return root


def load_byte_corpus(
    directory: str = "", suffix: str = ".py", max_bytes: int = 4_000_000, valid_every: int = 20
) -> dict[str, np.ndarray]:
    """Byte ids of the text files under `directory` (default: the stdlib), split by file.

    Files are read in sorted path order, streamed, until `max_bytes` in all (the last file cut short);
    every `valid_every`-th file goes to "valid", the rest to "train". Each file ends with eos.

    Returns:
      {"train": int32 ids, "valid": int32 ids}.
    """
    root = _checked_root(directory, suffix)
    parts: dict[str, list[np.ndarray]] = {"train": [], "valid": []}
    names: dict[str, list[str]] = {"train": [], "valid": []}
    for i, (path, data) in enumerate(_read_corpus(root, suffix, max_bytes)):
        ids = np.frombuffer(data, np.uint8).astype(np.int32) + BYTE_OFFSET
        split = "valid" if i % valid_every == valid_every - 1 else "train"
        parts[split].append(np.append(ids, SPECIALS.index("</s>")).astype(np.int32))
        names[split].append(str(path))
    if len(parts["train"]) + len(parts["valid"]) < 2:
        raise DataError(
            f"config.data.path={root!r} gives {len(parts['train']) + len(parts['valid'])} *{suffix} file(s) "
            f"(config.data.suffix) within config.data.max_bytes={max_bytes}; bytes_lm needs at least 2 "
            "(one for validation)"
        )
    if not parts["valid"]:
        parts["valid"].append(parts["train"].pop())
        names["valid"].append(names["train"].pop())
    if all(len(ids) == 1 for ids in parts["valid"]):  # eos alone: every validation file is empty
        raise DataError(
            f"config.data.path={root!r}: the validation split is empty: {', '.join(names['valid'])} (bytes_lm "
            f"validates on every {valid_every}-th *{suffix} file in sorted order, else on the last); remove the empty"
            " file or add text to it"
        )
    return {k: np.concatenate(v) for k, v in parts.items()}


def copy_byte_corpus(dest: str, directory: str = "", suffix: str = ".py", max_bytes: int = 4_000_000) -> dict:
    """Writes the bytes `load_byte_corpus` reads (every file it reads, the last cut to its bytes used) under DEST
    at their paths relative to the corpus folder: DEST read with any max_bytes up to this one gives the same ids.

    Returns:
      byte_corpus_record of DEST (its sha256 is the source's).
    """
    root = _checked_root(directory, suffix)
    for path, data in _read_corpus(root, suffix, max_bytes):
        write_bytes(os.path.join(dest, os.path.relpath(path, root)), data)
    return byte_corpus_record(dest, suffix, max_bytes)


def byte_corpus_record(directory: str = "", suffix: str = ".py", max_bytes: int = 4_000_000) -> dict:
    """What names the bytes `load_byte_corpus` uses, for a results.json.

    Returns:
      {"sha256": of the bytes used, file after file in read order (what `cat` of the files, the last cut
      to its bytes used, gives), "num_bytes", "files" (how many), "python_version"}.
    """
    digest, num_bytes, files = hashlib.sha256(), 0, 0
    for _, data in _read_corpus(_checked_root(directory, suffix), suffix, max_bytes):
        digest.update(data)
        num_bytes, files = num_bytes + len(data), files + 1
    return {
        "sha256": digest.hexdigest(),
        "num_bytes": num_bytes,
        "files": files,
        "python_version": platform.python_version(),
    }


def read_lines(path: str) -> list[str]:
    """The stripped lines of UTF-8 text file `path` (DataError naming it when it is not UTF-8)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f]
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); give UTF-8 files") from None


def load_parallel(directory: str, src_lang: str = "de", tgt_lang: str = "en", min_count: int = 1):
    """IWSLT14 as fairseq's prepare-iwslt14.sh leaves it: {train,valid,test}.{de,en}, BPE text.

    The joint vocabulary (both languages, one embedding table) is built from the training split;
    words seen fewer than `min_count` times map to unk.

    Returns:
      (vocab, splits, references): splits as {"train"|"valid"|"test": list of (src_ids, tgt_ids)}
      without bos/eos; references {"valid"|"test": list of target lines with BPE removed} for BLEU.
    """
    lines = {}
    for split in ("train", "valid", "test"):
        src = read_lines(os.path.join(directory, f"{split}.{src_lang}"))
        tgt = read_lines(os.path.join(directory, f"{split}.{tgt_lang}"))
        if len(src) != len(tgt):
            raise DataError(
                f"{os.path.join(directory, split)}.{src_lang} has {len(src)} lines but .{tgt_lang} has {len(tgt)}"
            )
        lines[split] = (src, tgt)
    vocab = Vocab.from_corpus(lines["train"][0] + lines["train"][1], min_count=min_count)
    splits = {
        split: [(vocab.encode(s), vocab.encode(t)) for s, t in zip(src, tgt, strict=True)]
        for split, (src, tgt) in lines.items()
    }
    refs = {split: [t.replace("@@ ", "").removesuffix("@@") for t in lines[split][1]] for split in ("valid", "test")}
    return vocab, splits, refs
