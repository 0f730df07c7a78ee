"""The gettext corpus builder on .mo files written here: filters, one pair per source, hash splits, errors."""

import hashlib
import json
import os
import struct
import subprocess
import sys

import pytest

from normjax.train import data_gettext
from normjax.train.data_gettext import CorpusSpec, build_corpus, read_mo, split_of
from normjax.train.data_text import DataError

HEADER = "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n"


def write_mo(path, entries: dict[str, str], big_endian=False):
    """The GNU .mo format: magic, revision, N, offsets of the two (length, offset) tables, no hash table."""
    order = ">" if big_endian else "<"
    keys = sorted(entries)
    ids, strs = [k.encode() for k in keys], [entries[k].encode() for k in keys]
    n = len(keys)
    blob, offset = b"", 28 + 16 * n
    tables = []
    for group in (ids, strs):
        table = []
        for s in group:
            table.append((len(s), offset + len(blob)))
            blob += s + b"\0"
        tables.append(table)
    head = struct.pack(f"{order}7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    body = b"".join(struct.pack(f"{order}2I", *e) for table in tables for e in table)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(head + body + blob)


def good_pairs(n, offset=0):
    return {f"open the file number {i}": f"die Datei Nummer {i} öffnen" for i in range(offset, offset + n)}


def make_catalogs(prefix, names=("app", "lib")):
    folder = prefix / "share" / "locale" / "de" / "LC_MESSAGES"
    a = {"": HEADER} | good_pairs(60)
    a |= {
        "Cancel": "Abbrechen",
        "Untranslated": "Untranslated",  # msgstr == msgid
        "  spaced\n out ": "",  # empty
        "%s: %s": "%s – %s",  # placeholder-only
        "{0}": "{0}.",  # placeholder-only
        "menu\x04Open": "Öffnen",  # a context
        "one file\x00%d files": "eine Datei\x00%d Dateien",  # a plural entry
    }
    b = {"": HEADER} | good_pairs(60, offset=30)  # 30 pairs repeat a's
    b |= {"Cancel": "Abbrechen", "Abort": "Abbrechen", "Quit": "Beenden"}  # "Abbrechen" three times
    write_mo(str(folder / f"{names[0]}.mo"), a)
    write_mo(str(folder / f"{names[1]}.mo"), b, big_endian=True)
    return folder


def test_read_mo_both_byte_orders(tmp_path):
    entries = {"": HEADER, "a": "b", "ctx\x04c": "d", "x\x00xs": "y\x00ys"}
    for big in (False, True):
        write_mo(str(tmp_path / "t.mo"), entries, big_endian=big)
        assert dict(read_mo(str(tmp_path / "t.mo"))) == entries
    (tmp_path / "bad.mo").write_bytes(b"\0" * 28)
    with pytest.raises(DataError, match="bad.mo"):
        read_mo(str(tmp_path / "bad.mo"))


def build(tmp_path, names=("app", "lib"), out="out", **kw):
    make_catalogs(tmp_path / f"prefix_{'_'.join(names)}", names)
    spec = CorpusSpec(prefixes=(str(tmp_path / f"prefix_{'_'.join(names)}"),), vocab_size=80, min_pairs=20, **kw)
    return spec, build_corpus(spec, str(tmp_path / out))


def read_split(folder, name, spec):
    src = (folder / f"{name}.{spec.src}").read_text().splitlines()
    tgt = (folder / f"{name}.{spec.tgt}").read_text().splitlines()
    return list(zip(src, tgt, strict=True))


def test_filters_one_pair_per_source_and_plurals(tmp_path):
    spec, manifest = build(tmp_path, valid_fraction=0.2, test_fraction=0.2)
    pairs = [p for name in data_gettext.SPLITS for p in read_split(tmp_path / "out", name, spec)]
    src = [s for s, _ in pairs]
    assert len(src) == len(set(src)) == sum(manifest["pairs"].values())
    assert manifest["dropped"] == {"duplicate": 30 + 2, "empty": 1, "placeholder_only": 2, "untranslated": 1}
    kept = dict(pairs)
    assert kept["Abbrechen"] == "Cancel"  # commonest translation (twice, "Abort" once)
    assert kept["Öffnen"] == "Open" and kept["Beenden"] == "Quit"
    assert kept["eine Datei"] == "one file" and kept["%d Dateien"] == "%d files"  # plural form of n = 2
    assert not {"Untranslated", "", "%s – %s", "{0}."} & set(kept)
    assert len(pairs) == 90 + 3 + 2  # 90 distinct numbered sentences, Abbrechen/Öffnen/Beenden, 2 plurals
    for name in data_gettext.SPLITS:
        assert all(split_of(s, spec) == name for s, _ in read_split(tmp_path / "out", name, spec))
        assert manifest["pairs"][name] > 0
    for cat in manifest["catalogs"]:
        with open(cat["path"], "rb") as f:
            assert cat["sha256"] == hashlib.sha256(f.read()).hexdigest()
    with open(tmp_path / "out" / "spm.model", "rb") as f:
        assert manifest["tokenizer"]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == json.loads(json.dumps(manifest))


def test_split_depends_on_the_source_text_only(tmp_path):
    spec, first = build(tmp_path, names=("app", "lib"), out="a")
    _, again = build(tmp_path, names=("zzz", "aaa"), out="b")  # other file names: another read order
    for name in data_gettext.SPLITS:
        assert read_split(tmp_path / "a", name, spec) == read_split(tmp_path / "b", name, spec)
    assert first["files"] == again["files"] and first["tokenizer"]["sha256"] == again["tokenizer"]["sha256"]
    assert split_of("die Datei Nummer 3 öffnen", spec) == split_of("die Datei Nummer 3 öffnen", CorpusSpec())


def test_direction_en_to_de(tmp_path):
    spec, manifest = build(tmp_path, src="en", tgt="de")
    pairs = dict(p for name in data_gettext.SPLITS for p in read_split(tmp_path / "out", name, spec))
    assert pairs["Cancel"] == "Abbrechen" and pairs["Abort"] == "Abbrechen"  # distinct English sources
    assert manifest["settings"]["src"] == "en" and (tmp_path / "out" / "train.en").exists()


def test_too_few_pairs_is_one_line_naming_the_count_and_folders(tmp_path):
    folder = make_catalogs(tmp_path)
    spec = CorpusSpec(prefixes=(str(tmp_path),), min_pairs=10_000)
    with pytest.raises(DataError, match=r"found 95 de-en translation pairs \(need 10000\)") as e:
        build_corpus(spec, str(tmp_path / "out"))
    assert str(folder) in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()
    with pytest.raises(DataError, match="found 0 fr-en"):
        build_corpus(CorpusSpec(src="fr", prefixes=(str(tmp_path),)), str(tmp_path / "out"))


def test_cli_exit_2_with_one_line(tmp_path):
    make_catalogs(tmp_path)
    cmd = [sys.executable, "-m", "normjax.train.data_gettext", f"--prefixes={tmp_path}", f"--out={tmp_path / 'o'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("data error: found 95 de-en translation pairs")
    proc = subprocess.run([*cmd, "--tgt=de"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("config error: src and tgt are both 'de'")
    proc = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=120)  # no --out
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--out" in proc.stderr


def _good_mo_bytes(tmp_path) -> bytes:
    write_mo(str(tmp_path / "good.mo"), {"": HEADER} | good_pairs(20))
    return (tmp_path / "good.mo").read_bytes()


def _with_word(word: int, value: int):
    return lambda data: data[: 4 * word] + struct.pack("<I", value) + data[4 * word + 4 :]


HOSTILE = {  # name: (the bad catalog's bytes from a good one's, words of the message)
    "empty": (lambda data: b"", ["0 bytes", "20-byte header"]),
    "header cut": (lambda data: data[:12], ["12 bytes"]),
    "tables cut": (lambda data: data[:40], ["tables of 21 entries", "truncated"]),
    "strings cut": (lambda data: data[:-30], ["ends at byte", "truncated"]),
    "huge count": (_with_word(2, 2**31), ["2147483648 entries", "truncated"]),
    "table past the end": (_with_word(3, 10**9), ["past the file's"]),
    "unknown revision": (_with_word(1, 7 << 16), ["major revision 7"]),
    "bad charset": (lambda data: data.replace(b"charset=UTF-8", b"charset=NOPE-9"), ["charset 'NOPE-9'"]),
    "not its charset": (lambda data: data.replace("ö".encode(), b"\xff\xfe"), ["not UTF-8"]),
    "plural by zero": (lambda data: data.replace(b"(n != 1)", b"n%0     "), ["Plural-Forms 'n%0"]),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_damaged_catalog_is_refused_naming_it(tmp_path, case):
    """Before: entries past the end read as empty strings, struct/Lookup/ZeroDivision tracebacks."""
    damage, words = HOSTILE[case]
    bad = tmp_path / "share" / "locale" / "de" / "LC_MESSAGES" / "bad.mo"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(damage(_good_mo_bytes(tmp_path)))
    spec = CorpusSpec(prefixes=(str(tmp_path),), min_pairs=1)
    with pytest.raises(DataError) as e:
        build_corpus(spec, str(tmp_path / "out"))
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    assert all(word in str(e.value) for word in words), str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["folder", "broken link"])
def test_a_catalog_that_is_no_file_is_refused_naming_it(tmp_path, kind):
    folder = make_catalogs(tmp_path)
    bad = folder / "bad.mo"
    bad.mkdir() if kind == "folder" else bad.symlink_to(tmp_path / "nowhere.mo")
    with pytest.raises(DataError, match=rf"{bad} cannot be read"):
        build_corpus(CorpusSpec(prefixes=(str(tmp_path),), min_pairs=1), str(tmp_path / "out"))


def test_an_empty_valid_or_test_split_is_an_error(tmp_path):
    """Before: written with 0 valid and 0 test pairs, exit 0."""
    make_catalogs(tmp_path)
    spec = CorpusSpec(prefixes=(str(tmp_path),), vocab_size=80, min_pairs=1, valid_fraction=1e-9, test_fraction=1e-9)
    with pytest.raises(DataError, match="the valid and test split of 95 de-en pairs is empty"):
        build_corpus(spec, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def _edit_manifest(folder, edit):
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _empty_valid(folder, manifest):
    for lang in ("de", "en"):
        (folder / f"valid.{lang}").write_bytes(b"")
        manifest["files"][f"valid.{lang}"] = hashlib.sha256(b"").hexdigest()
    manifest["pairs"]["valid"] = 0


def _not_utf8(folder, manifest):
    data = (folder / "valid.de").read_bytes()[:-2] + b"\xff\n"
    (folder / "valid.de").write_bytes(data)
    manifest["files"]["valid.de"] = hashlib.sha256(data).hexdigest()


CORPUS_EDITS = {  # a built corpus edited: (edit(folder, manifest), words of the message)
    "tokenizer file an int": (lambda f, m: m["tokenizer"].update(file=5), ["manifest.json", "file names [5]"]),
    "a file outside": (lambda f, m: m["files"].update({"../x": "0"}), ["file names ['../x']"]),
    "empty valid split": (_empty_valid, ["its valid split is empty"]),
    "split not utf-8": (_not_utf8, ["valid.de is not UTF-8"]),
}


@pytest.mark.parametrize("case", CORPUS_EDITS)
def test_the_training_path_refuses_a_damaged_corpus_in_one_line(tmp_path, case):
    """load_corpus (what a gettext training run reads). Before: TypeError, a file outside the folder hashed,
    'none of the 0 sequence pairs fits max_len', UnicodeDecodeError."""
    build(tmp_path, valid_fraction=0.2, test_fraction=0.2)
    edit, words = CORPUS_EDITS[case]
    _edit_manifest(tmp_path / "out", lambda m: edit(tmp_path / "out", m))
    with pytest.raises(DataError) as e:
        data_gettext.load_corpus(str(tmp_path / "out"))
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_a_training_run_on_a_damaged_catalog_exits_2_in_one_line(tmp_path, capsys, monkeypatch):
    """The train CLI building its corpus from catalogs (config.data.catalog_prefixes). Before: a struct.error
    traceback."""
    from normjax.experiments import common
    from normjax.experiments.train import EXPERIMENT

    folder = make_catalogs(tmp_path)
    (folder / "bad.mo").write_bytes(b"\xde\x12\x04\x95")
    monkeypatch.setenv("NORMJAX_CACHE", str(tmp_path / "cache"))
    args = ["--config.data.task=gettext", f"--config.data.catalog_prefixes={tmp_path}", "--print_config"]
    assert common.run_cli(EXPERIMENT, ["prog", f"--workdir={tmp_path / 'w'}", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"data error: {folder / 'bad.mo'} is not a valid gettext .mo file (4 bytes, shorter than its "
        "20-byte header); refused"
    ), err


def test_a_cache_folder_in_the_way_is_named(tmp_path, monkeypatch):
    """Before: an OSError (directory not empty) traceback."""
    make_catalogs(tmp_path)
    monkeypatch.setenv("NORMJAX_CACHE", str(tmp_path / "cache"))
    spec = CorpusSpec(prefixes=(str(tmp_path),), vocab_size=80, min_pairs=1)
    folder = data_gettext.cached_corpus(spec)
    os.remove(os.path.join(folder, "manifest.json"))
    with pytest.raises(DataError, match=f"{folder} is in the way"):
        data_gettext.cached_corpus(spec)


@pytest.mark.parametrize("out", ["a_file", "a_file/sub", "blocked"])
def test_an_out_folder_that_cannot_hold_the_corpus_is_one_line_exit_2(tmp_path, capsys, out):
    """Before: FileExistsError / NotADirectoryError / IsADirectoryError tracebacks, exit 1."""
    make_catalogs(tmp_path)
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "blocked" / "train.de").mkdir(parents=True)  # a folder where the first corpus file goes
    argv = [f"--prefixes={tmp_path}", f"--out={tmp_path / out}", "--min_pairs=1", "--vocab_size=80"]
    assert data_gettext.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / out) in err, err
    assert (tmp_path / "a_file").read_text() == "x" and (tmp_path / "blocked" / "train.de").is_dir()
