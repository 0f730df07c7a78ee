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
import struct
import sys

import sentencepiece as spm

from normjax.train.data_text import DataError

SPLITS = ("train", "valid", "test")
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


def read_mo(path: str) -> list[tuple[str, str]]:
    """(msgid, msgstr) of a compiled catalog, decoded with its header's charset; a context is kept as
    "ctx\\x04msgid", plural forms as NUL-separated strings (as the .mo file stores them)."""
    with open(path, "rb") as f:
        data = f.read()
    (magic,) = struct.unpack("<I", data[:4])
    order = "<" if magic == MO_MAGIC else ">"
    if struct.unpack(f"{order}I", data[:4])[0] != MO_MAGIC:
        raise DataError(f"{path} is not a gettext .mo file (bad magic number)")
    _, n, orig, trans = struct.unpack(f"{order}4I", data[4:20])
    entries = []
    for i in range(n):
        (ln, lo), (tn, to) = (struct.unpack(f"{order}2I", data[t + 8 * i : t + 8 * i + 8]) for t in (orig, trans))
        entries.append((data[lo : lo + ln], data[to : to + tn]))
    header = dict(entries).get(b"", b"").decode("ascii", "replace")
    charset = re.search(r"charset=\s*([-\w]+)", header)
    enc = charset.group(1) if charset and charset.group(1).upper() != "CHARSET" else "utf-8"
    return [(k.decode(enc, "replace"), v.decode(enc, "replace")) for k, v in entries]


def _plural_index(entries) -> int:
    """The plural form of n = 2 (the smallest English plural) from the header's Plural-Forms."""
    header = dict(entries).get("", "")
    found = re.search(r"plural\s*=\s*([^;\n]+)", header)
    try:
        return int(gettext.c2py(found.group(1))(2)) if found else 1
    except (ValueError, SyntaxError):
        return 1


def catalog_texts(path: str) -> dict[tuple[str, str], str]:
    """{(context, English msgid): translation} of one catalog. A plural entry gives two: the singular
    msgid with form 0 and the plural msgid with the form of n = 2."""
    entries = read_mo(path)
    plural = _plural_index(entries)
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
            with open(path, "rb") as f:
                catalogs.append({"path": path, "sha256": hashlib.sha256(f.read()).hexdigest()})
            for (context, msgid), text in catalog_texts(path).items():
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
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def build_corpus(spec: CorpusSpec, out: str) -> dict:
    """Writes OUT/{train,valid,test}.{src,tgt} (one raw sentence per line), OUT/spm.model (trained on
    the train split, both sides) and OUT/manifest.json; returns the manifest.

    Raises:
      DataError: fewer than spec.min_pairs pairs (one line: how many, and the folders looked in).
    """
    pairs, info = extract_pairs(spec)
    splits = {name: [] for name in SPLITS}
    for src, tgt in pairs:
        splits[split_of(src, spec)].append((src, tgt))
    os.makedirs(out, exist_ok=True)
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
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


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
    except ValueError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, "pairs": manifest["pairs"], "dropped": manifest["dropped"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
