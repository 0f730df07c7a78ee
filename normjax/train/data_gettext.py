"""A translation corpus from the system's gettext catalogs: pairs, hash splits, a sentencepiece BPE model."""

import argparse
import collections
import dataclasses
import gettext
import hashlib
import io
import json
import os
import platform
import re
import shutil
import struct
import sys
import tempfile

import numpy as np
import sentencepiece as spm

from normjax.io import WorkdirError, write_bytes, write_text
from normjax.train.data_text import DataError, read_lines
from normjax.train.vocab import SubwordVocab

SPLITS = ("train", "valid", "test")
MANIFEST = "manifest.json"
MO_MAGIC = 0x950412DE
# printf (%s, %-10lu, %1$s, %(name)s), brace ({0}, {name}, {}) and shell ($HOME, ${x}) placeholders
PLACEHOLDER = re.compile(
    r"%(\(\w+\)|\d+\$)?[-+ #0']*\d*(\.\d+)?(hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspnm%]|\{\w*\}|\$\{?\w+\}?"
)


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    """What the builder extracts and how it splits and tokenizes (all recorded in the manifest)."""

    src: str = "de"
    tgt: str = "en"  # "en" is the catalogs' msgids; two other languages are joined on their msgids
    prefixes: tuple[str, ...] = ()  # () = sys.prefix, sys.base_prefix, /usr/local, /usr
    valid_fraction: float = 0.03
    test_fraction: float = 0.03
    vocab_size: int = 8000  # joint BPE over both sides of the train split (a soft limit on small data)
    min_pairs: int = 1000

    def __post_init__(self):
        if self.vocab_size < 8 or self.min_pairs < 1:
            raise ValueError(f"vocab_size={self.vocab_size} must be >= 8 and min_pairs={self.min_pairs} >= 1")
        if self.src == self.tgt:
            raise ValueError(f"src and tgt are both {self.src!r}; give two languages")
        if not (self.valid_fraction > 0 and self.test_fraction > 0 and self.valid_fraction + self.test_fraction < 1):
            raise ValueError(
                f"valid_fraction={self.valid_fraction} and test_fraction={self.test_fraction} must be > 0, sum < 1"
            )


def locale_dirs(prefixes: tuple[str, ...] = ()) -> list[str]:
    """<prefix>/share/locale for each prefix (default: this Python's prefixes, /usr/local, /usr), de-duplicated."""
    prefixes = prefixes or (sys.prefix, sys.base_prefix, "/usr/local", "/usr")
    out = []
    for prefix in prefixes:
        path = os.path.realpath(os.path.join(prefix, "share", "locale"))
        if path not in out:
            out.append(path)
    return out


def read_bytes(path: str) -> bytes:
    """The bytes of `path`; a folder, a broken link or an unreadable file is a DataError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e}); a readable file is needed") from None


def read_mo(path: str, data: bytes | None = None) -> list[tuple[str, str]]:
    """(msgid, msgstr) of a compiled catalog (its bytes `data`, else read from `path`), decoded with its header's
    charset; a context is kept as "ctx\\x04msgid", plural forms as NUL-separated strings (as the .mo file stores them).

    Raises:
      DataError: naming `path` when it is not a whole, well-formed .mo file (truncated, a table or string past
        its end, an unknown revision or charset, text that is not in its charset).
    """
    data = read_bytes(path) if data is None else data
    bad = lambda why: DataError(f"{path} is not a valid gettext .mo file ({why}); refused")
    if len(data) < 20:
        raise bad(f"{len(data)} bytes, shorter than its 20-byte header")
    (magic,) = struct.unpack("<I", data[:4])
    order = "<" if magic == MO_MAGIC else ">"
    if struct.unpack(f"{order}I", data[:4])[0] != MO_MAGIC:
        raise DataError(f"{path} is not a gettext .mo file (bad magic number)")
    revision, n, orig, trans = struct.unpack(f"{order}4I", data[4:20])
    if revision >> 16 not in (0, 1):
        raise bad(f"major revision {revision >> 16}; 0 and 1 are known")
    if max(orig, trans) + 8 * n > len(data):
        raise bad(f"its tables of {n} entries end past the file's {len(data)} bytes: truncated")
    entries = []
    for i in range(n):
        (ln, lo), (tn, to) = (struct.unpack(f"{order}2I", data[t + 8 * i : t + 8 * i + 8]) for t in (orig, trans))
        if max(lo + ln, to + tn) > len(data):
            raise bad(f"entry {i} ends at byte {max(lo + ln, to + tn)}, past the file's {len(data)} bytes: truncated")
        entries.append((data[lo : lo + ln], data[to : to + tn]))
    header = dict(entries).get(b"", b"").decode("ascii", "replace")
    charset = re.search(r"charset=\s*([-\w]+)", header)
    enc = charset.group(1) if charset and charset.group(1).upper() != "CHARSET" else "utf-8"
    try:
        return [(k.decode(enc), v.decode(enc)) for k, v in entries]
    except LookupError:
        raise bad(f"its header's charset {enc!r} is not an encoding Python knows") from None
    except UnicodeDecodeError as e:
        raise bad(f"text that is not {enc}: {e.reason} at byte {e.start} of an entry") from None


def _plural_index(entries, path: str) -> int:
    """The plural form of n = 2 (the smallest English plural) from the header's Plural-Forms (DataError naming
    `path` when it cannot be evaluated)."""
    header = dict(entries).get("", "")
    found = re.search(r"plural\s*=\s*([^;\n]+)", header)
    try:
        return int(gettext.c2py(found.group(1))(2)) if found else 1
    except (ValueError, SyntaxError, ArithmeticError, RecursionError) as e:
        raise DataError(f"{path}: its Plural-Forms {found.group(1)[:60]!r} cannot be evaluated ({e})") from None


def catalog_texts(path: str, data: bytes | None = None) -> dict[tuple[str, str], str]:
    """{(context, English msgid): translation} of one catalog (its bytes `data`, else read from `path`). A plural
    entry gives two: the singular msgid with form 0 and the plural msgid with the form of n = 2."""
    entries = read_mo(path, data)
    plural = _plural_index(entries, path)
    out = {}
    for key, value in entries:
        if not key:
            continue  # the header
        context, _, msgid = key.rpartition("\x04")
        ids, forms = msgid.split("\x00"), value.split("\x00")
        out[(context, ids[0])] = forms[0]
        if len(ids) > 1 and len(forms) > 1:
            out[(context, ids[1])] = forms[min(plural, len(forms) - 1)]
    return out


def clean(text: str) -> str:
    """One line: whitespace runs (newlines, tabs) to single spaces."""
    return " ".join(text.split())


def placeholder_only(text: str) -> bool:
    """True when nothing but placeholders, digits, punctuation and spaces is left (no letter)."""
    return not any(c.isalpha() for c in PLACEHOLDER.sub("", text))


def split_of(src: str, spec: CorpusSpec) -> str:
    """train / valid / test from the sha256 of the source text (independent of catalog and file order)."""
    u = int.from_bytes(hashlib.sha256(src.encode()).digest()[:8], "big") / 2**64
    return "test" if u < spec.test_fraction else "valid" if u < spec.test_fraction + spec.valid_fraction else "train"


def _catalogs(spec: CorpusSpec) -> tuple[dict[str, list[str]], list[str]]:
    """{language: sorted .mo paths} for the non-English languages, and the LC_MESSAGES folders looked in."""
    found, looked = {}, []
    for lang in {spec.src, spec.tgt} - {"en"}:
        found[lang] = []
        for root in locale_dirs(spec.prefixes):
            folder = os.path.join(root, lang, "LC_MESSAGES")
            looked.append(folder)
            if os.path.isdir(folder):
                found[lang] += sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".mo"))
    return found, looked


def extract_pairs(spec: CorpusSpec):
    """Cleaned (src, tgt) pairs, one per source text, and the manifest's catalog and count entries."""
    found, looked = _catalogs(spec)
    texts = {}  # language -> {(domain, context, msgid): text}
    catalogs = []
    for lang, paths in found.items():
        texts[lang] = {}
        for path in paths:
            domain = os.path.basename(path)[: -len(".mo")]
            data = read_bytes(path)
            catalogs.append({"path": path, "sha256": hashlib.sha256(data).hexdigest()})
            for (context, msgid), text in catalog_texts(path, data).items():
                texts[lang].setdefault((domain, context, msgid), text)
    keys = set.intersection(*(set(t) for t in texts.values())) if texts else set()
    side = lambda lang, key: key[2] if lang == "en" else texts[lang][key]
    dropped = collections.Counter()
    by_src = collections.defaultdict(collections.Counter)
    for key in sorted(keys):
        src, tgt = clean(side(spec.src, key)), clean(side(spec.tgt, key))
        if not src or not tgt:
            dropped["empty"] += 1
        elif src == tgt:
            dropped["untranslated"] += 1
        elif placeholder_only(src) or placeholder_only(tgt):
            dropped["placeholder_only"] += 1
        else:
            by_src[src][tgt] += 1
    # one pair per source text: its commonest translation (ties: the first in sorted order)
    pairs = [(src, min(tgts, key=lambda t: (-tgts[t], t))) for src, tgts in sorted(by_src.items())]
    dropped["duplicate"] = sum(sum(t.values()) for t in by_src.values()) - len(pairs)
    info = {"catalogs": catalogs, "looked_in": looked, "entries": len(keys), "dropped": dict(sorted(dropped.items()))}
    if len(pairs) < spec.min_pairs:
        raise DataError(
            f"found {len(pairs)} {spec.src}-{spec.tgt} translation pairs (need {spec.min_pairs}) in "
            f"{len(catalogs)} .mo catalogs under {', '.join(looked)}"
        )
    return pairs, info


def train_bpe(lines: list[str], vocab_size: int) -> bytes:
    """A sentencepiece BPE model of `lines` (ids: pad 0, bos 1, eos 2, unk 3, as normjax.train.vocab)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def _write(path: str, data: bytes) -> str:
    write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def build_corpus(spec: CorpusSpec, out: str) -> dict:
    """Writes OUT/{train,valid,test}.{src,tgt} (one raw sentence per line), OUT/spm.model (trained on
    the train split, both sides) and OUT/manifest.json; returns the manifest.

    Raises:
      DataError: fewer than spec.min_pairs pairs (one line: how many, and the folders looked in), a split
        that would be empty, or a catalog that is not a whole .mo file (naming it).
    """
    pairs, info = extract_pairs(spec)
    splits = {name: [] for name in SPLITS}
    for src, tgt in pairs:
        splits[split_of(src, spec)].append((src, tgt))
    if empty := [name for name, rows in splits.items() if not rows]:
        raise DataError(
            f"the {' and '.join(empty)} split of {len(pairs)} {spec.src}-{spec.tgt} pairs is empty (valid_fraction="
            f"{spec.valid_fraction}, test_fraction={spec.test_fraction}); raise the fraction or add catalogs"
        )
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:  # a file where the folder or one of its parents should be
        raise DataError(f"the corpus folder {out} cannot be made ({e.strerror}): give a folder path") from None
    files = {}
    for name, rows in splits.items():
        for lang, col in ((spec.src, 0), (spec.tgt, 1)):
            text = "".join(row[col] + "\n" for row in rows).encode()
            files[f"{name}.{lang}"] = _write(os.path.join(out, f"{name}.{lang}"), text)
    model = train_bpe([s for row in splits["train"] for s in row], spec.vocab_size)
    manifest = {
        "source": "gettext catalogs (share/locale/<lang>/LC_MESSAGES/*.mo)",
        "settings": dataclasses.asdict(spec),
        **info,
        "pairs": {name: len(rows) for name, rows in splits.items()},
        "files": files,
        "tokenizer": {
            "file": "spm.model",
            "sha256": _write(os.path.join(out, "spm.model"), model),
            "type": "sentencepiece bpe",
            "vocab_size": spm.SentencePieceProcessor(model_proto=model).get_piece_size(),
        },
        "versions": {"python": platform.python_version(), "sentencepiece": spm.__version__},
    }
    write_text(os.path.join(out, MANIFEST), json.dumps(manifest, indent=1))
    return manifest


CORPUS_ENV = "NORMJAX_GETTEXT_CORPUS"


def cache_root() -> str:
    """$NORMJAX_CACHE, else $XDG_CACHE_HOME/normjax, else ~/.cache/normjax."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("NORMJAX_CACHE") or os.path.join(xdg, "normjax")


def _sha256_file(path: str) -> str:
    return hashlib.sha256(read_bytes(path)).hexdigest()


def carried_corpus(folder: str, spec: CorpusSpec) -> str:
    """FOLDER, a corpus built elsewhere for `spec` (its manifest's settings must be spec's; load_corpus checks
    its files). Raises DataError naming the settings that differ."""
    path = os.path.join(folder, MANIFEST)
    try:
        settings = json.loads(read_bytes(path))["settings"]
    except (ValueError, KeyError, TypeError) as e:  # read_bytes: a missing file is a DataError naming it
        raise DataError(f"${CORPUS_ENV}: {path} is not a corpus manifest ({type(e).__name__}: {e})") from None
    want = json.loads(json.dumps(dataclasses.asdict(spec)))  # tuples as lists, as the manifest holds them
    if differ := sorted(k for k in set(want) | set(settings) if settings.get(k) != want.get(k)):
        raise DataError(f"${CORPUS_ENV}={folder} was built with other settings than the run's: {', '.join(differ)}")
    return folder


def cached_corpus(spec: CorpusSpec) -> str:
    """The folder of `spec`'s corpus: $NORMJAX_GETTEXT_CORPUS when set (a corpus built on another machine for
    the same spec, carried), else the one built from this machine's catalogs: cache_root()/gettext-SRC-TGT-KEY,
    KEY a hash of the settings and of every catalog's path and sha256 (other catalogs or settings: another
    folder). An existing folder is reused; a new one is built in a temporary folder and renamed into place
    (of concurrent builders the first rename wins; the others' identical builds are discarded).

    Raises:
      DataError: fewer than spec.min_pairs pairs (one line: how many, and the folders looked in).
    """
    if carried := os.environ.get(CORPUS_ENV):
        return carried_corpus(carried, spec)
    found, _ = _catalogs(spec)
    key = hashlib.sha256(json.dumps(dataclasses.asdict(spec), sort_keys=True).encode())
    for path in sorted(p for paths in found.values() for p in paths):
        key.update(f"{path}\0{_sha256_file(path)}\0".encode())
    folder = os.path.join(cache_root(), f"gettext-{spec.src}-{spec.tgt}-{key.hexdigest()[:12]}")
    if os.path.isfile(os.path.join(folder, MANIFEST)):
        return folder
    os.makedirs(cache_root(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-", dir=cache_root())
    try:
        build_corpus(spec, tmp)
        try:
            os.rename(tmp, folder)
        except OSError as e:  # another builder won (its manifest is there), or something else is in the way
            if not os.path.isfile(os.path.join(folder, MANIFEST)):
                raise DataError(f"{folder} is in the way ({e.strerror}), with no {MANIFEST}: move it") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _check_files(folder: str, want: dict[str, str]) -> None:
    """Raises DataError when a file (name -> sha256 in the manifest) is missing or has other bytes."""
    for name, sha in want.items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path) or _sha256_file(path) != sha:
            what = "is missing" if not os.path.isfile(path) else "differs from the sha256 in its manifest.json"
            raise DataError(f"{path} {what}; rebuild the corpus (python -m normjax.train.data_gettext --out=...)")


def load_corpus(folder: str, src: str = "de", tgt: str = "en"):
    """A corpus written by build_corpus, its files checked against its manifest, tokenized with its model.

    Returns:
      (vocab, splits, references, record): a SubwordVocab; {"train"|"valid"|"test": list of (src_ids,
      tgt_ids)} without bos/eos; {"valid"|"test": raw target lines} for BLEU; and what names the data for
      summary.json: {"path", "manifest_sha256" (of manifest.json's bytes), "pairs", "tokenizer_sha256",
      "vocab_size"}.

    Raises:
      DataError: another language pair, a missing or changed file, or split files of unequal length.
    """
    path = os.path.join(folder, MANIFEST)
    raw = read_bytes(path)
    try:
        manifest = json.loads(raw)
        built = (manifest["settings"]["src"], manifest["settings"]["tgt"])
        tokenizer = manifest["tokenizer"]["file"]
        files = dict(manifest["files"]) | {tokenizer: manifest["tokenizer"]["sha256"]}
        pairs = {name: int(manifest["pairs"][name]) for name in SPLITS}
        if odd := [n for n in files if not isinstance(n, str) or os.path.basename(n) != n or n in ("", ".", "..")]:
            raise ValueError(f"file names {odd} are not plain names of files in its folder")
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path} is not a corpus manifest ({type(e).__name__}: {e})") from None
    if empty := [name for name in SPLITS if pairs[name] <= 0]:
        raise DataError(f"{folder}: its {' and '.join(empty)} split is empty; rebuild it with larger fractions")
    if built != (src, tgt):
        raise DataError(f"{folder} is a {built[0]}-{built[1]} corpus but config.data.src_lang/tgt_lang are {src}-{tgt}")
    _check_files(folder, files)
    with open(os.path.join(folder, tokenizer), "rb") as f:
        try:
            vocab = SubwordVocab(f.read())
        except ValueError as e:
            raise DataError(f"{f.name}: {e}") from None
    lines = {name: [read_lines(os.path.join(folder, f"{name}.{lang}")) for lang in (src, tgt)] for name in SPLITS}
    for name, (s, t) in lines.items():
        if not len(s) == len(t) == pairs[name]:
            raise DataError(
                f"{folder}: {name} has {len(s)} {src} and {len(t)} {tgt} lines, manifest says {pairs[name]}"
            )
    splits = {
        name: [
            (np.asarray(a, np.int32), np.asarray(b, np.int32)) for a, b in zip(*map(vocab.encode_all, st), strict=True)
        ]
        for name, st in lines.items()
    }
    record = {
        "path": os.path.abspath(folder),
        "manifest_sha256": hashlib.sha256(raw).hexdigest(),
        "pairs": pairs,
        "tokenizer_sha256": files[tokenizer],
        "vocab_size": len(vocab),
    }
    return vocab, splits, {name: lines[name][1] for name in ("valid", "test")}, record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m normjax.train.data_gettext", description=__doc__)
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--prefixes", default="", help="comma list of install prefixes (default: Python's, /usr/local, /usr)"
    )
    for name in ("valid_fraction", "test_fraction"):
        p.add_argument(f"--{name}", type=float, default=getattr(CorpusSpec, name))
    for name in ("vocab_size", "min_pairs"):
        p.add_argument(f"--{name}", type=int, default=getattr(CorpusSpec, name))
    p.error = lambda message: sys.exit(print(f"config error: {message}", file=sys.stderr) or 2)  # one line
    args = p.parse_args(argv)
    try:
        spec = CorpusSpec(
            args.src,
            args.tgt,
            tuple(filter(None, args.prefixes.split(","))),
            args.valid_fraction,
            args.test_fraction,
            args.vocab_size,
            args.min_pairs,
        )
        manifest = build_corpus(spec, args.out)
    except DataError as e:
        print(f"data error: {e}", file=sys.stderr)
        return 2
    except WorkdirError as e:  # a link or a folder where a file of the corpus goes, a full disk
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, "pairs": manifest["pairs"], "dropped": manifest["dropped"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
