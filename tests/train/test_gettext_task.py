"""The gettext translation task on a corpus built here from small .mo files: loading, batches, BLEU, records."""

import hashlib
import json
import os
import pathlib

import numpy as np
import pytest

from normjax.experiments import common
from normjax.experiments.train import EXPERIMENT
from normjax.train import decode, records
from normjax.train.batching import BatchSpec
from normjax.train.config_io import ConfigError, parse
from normjax.train.config_schema import DataConfig
from normjax.train.data_gettext import CorpusSpec, build_corpus, cached_corpus, load_corpus
from normjax.train.data_text import DataError
from normjax.train.sweep import expand, run_sweep
from normjax.train.tasks import load_task
from normjax.train.vocab import EOS, SubwordVocab
from tests.train.test_data_gettext import HEADER, write_mo

WORDS = {"file": "Datei", "window": "Fenster", "folder": "Ordner", "page": "Seite", "image": "Bild"}
VERBS = {"open": "öffnen", "close": "schließen", "save": "speichern", "print": "drucken", "delete": "löschen"}
COUNTS = {"one": "eine", "two": "zwei", "three": "drei", "four": "vier", "five": "fünf", "six": "sechs"}


def write_catalogs(prefix, n: int = 150) -> str:
    """A German catalog of up to 150 distinct English-German pairs under PREFIX/share/locale; returns PREFIX."""
    entries = {"": HEADER}
    for v, vd in VERBS.items():
        for w, wd in WORDS.items():
            for c, cd in COUNTS.items():
                if len(entries) <= n:
                    entries[f"{v} {c} {w} of the list"] = f"{cd} {wd} der Liste {vd}"
    write_mo(str(prefix / "share" / "locale" / "de" / "LC_MESSAGES" / "app.mo"), entries)
    return str(prefix)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("gettext")
    spec = CorpusSpec(prefixes=(write_catalogs(root / "prefix"),), valid_fraction=0.15, test_fraction=0.15,
                      vocab_size=120, min_pairs=20)  # fmt: skip
    out = str(root / "corpus")
    return spec, out, build_corpus(spec, out)


TINY = [
    "--config=:quick",
    "--config.data.task=gettext",
    "--config.data.max_len=24",
    "--config.model.d_model=32",
    "--config.model.num_heads=2",
    "--config.model.d_ff=64",
    "--config.model.num_layers=1",
    "--config.train.max_tokens=128",
    "--config.train.lr=3e-3",
    "--config.train.warmup_steps=0",
    "--config.train.num_steps=30",
    "--config.train.log_every=10",
    "--config.train.eval_every=10",
    "--config.train.checkpoint_every=30",
    "--config.train.bleu_examples=16",
    "--config.train.diag_every=0",
    "--progress=false",
]


def test_the_task_loads_the_corpus_in_buckets_with_its_subword_model(corpus):
    spec, out, manifest = corpus
    data = DataConfig(task="gettext", path=out, max_len=24, buckets=(12,))
    task = load_task(data, BatchSpec(max_tokens=64), seed=0, bleu_examples=8)
    assert isinstance(task.vocab, SubwordVocab) and len(task.vocab) == manifest["tokenizer"]["vocab_size"]
    assert len(task.train.pairs) + task.train.num_dropped == manifest["pairs"]["train"]
    src = pathlib.Path(out, "train.de").read_text().splitlines()
    tgt = pathlib.Path(out, "train.en").read_text().splitlines()
    for (s, t), i in zip(task.train.pairs, task.train.kept, strict=True):
        assert (task.vocab.decode(s), task.vocab.decode(t)) == (src[i], tgt[i])  # ids of the raw lines
    for pos in range(task.train.batches_per_epoch):
        batch = task.train.batch(pos)
        rows, length = batch["tgt_out"].shape
        assert length in (12, 24) and rows == 64 // length
        ends = batch["tgt_mask"].sum(1)[batch["tgt_mask"].any(1)] - 1
        assert (batch["tgt_out"][batch["tgt_mask"].any(1), ends] == EOS).all()
    # BLEU is on the held-out test split, against its raw lines
    assert task.bleu_split == "test" and task.references == pathlib.Path(out, "test.en").read_text().splitlines()
    assert len(task.bleu.pairs) + task.bleu.num_dropped == min(8, manifest["pairs"]["test"])
    with open(os.path.join(out, "manifest.json"), "rb") as f:
        assert task.record["manifest_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert task.record["pairs"] == manifest["pairs"]


def test_bleu_of_the_reference_ids_is_100(corpus):
    _, out, _ = corpus
    task = load_task(DataConfig(task="gettext", path=out, max_len=24), BatchSpec(8), seed=0, bleu_examples=16)
    positions = iter(range(task.bleu.batches_per_epoch))  # a "model" that outputs the reference ids
    fn = lambda params, consts, src, mask: task.bleu.batch(next(positions))["tgt_out"]
    hyps, refs = decode.translate(fn, None, None, task.bleu, task.vocab, task.references)
    assert hyps == refs and len(refs) == len(task.bleu.pairs)
    assert decode.corpus_bleu(hyps, refs) == pytest.approx(100.0)
    assert decode.corpus_bleu([""] * len(refs), refs) == 0.0


def test_a_changed_corpus_file_or_another_language_pair_is_a_data_error(corpus, tmp_path):
    spec, out, _ = corpus
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(out):
        (copy / name).write_bytes(pathlib.Path(out, name).read_bytes())
    with pytest.raises(DataError, match="a de-en corpus but config.data.src_lang/tgt_lang are en-de"):
        load_corpus(str(copy), "en", "de")
    (copy / "valid.en").write_text("edited\n")
    with pytest.raises(DataError, match="valid.en differs from the sha256 in its manifest.json"):
        load_corpus(str(copy), "de", "en")


def test_the_cache_is_built_once_per_catalogs_and_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMJAX_CACHE", str(tmp_path / "cache"))
    spec = CorpusSpec(prefixes=(write_catalogs(tmp_path / "prefix"),), vocab_size=60, min_pairs=20)
    folder = cached_corpus(spec)
    assert os.path.dirname(folder) == str(tmp_path / "cache") and os.path.basename(folder).startswith("gettext-de-en-")
    stamp = os.stat(os.path.join(folder, "manifest.json")).st_mtime_ns
    assert cached_corpus(spec) == folder and os.stat(os.path.join(folder, "manifest.json")).st_mtime_ns == stamp
    assert cached_corpus(CorpusSpec(prefixes=spec.prefixes, vocab_size=61, min_pairs=20)) != folder
    write_catalogs(tmp_path / "prefix", n=140)  # other catalogs: another corpus
    assert cached_corpus(spec) != folder
    assert not [name for name in os.listdir(tmp_path / "cache") if name.startswith(".tmp")]
    data = {"task": "gettext", "catalog_prefixes": spec.prefixes, "min_pairs": 20, "bpe_vocab_size": 60}
    run = parse({"data": data, "train": {"warmup_steps": 0}})
    assert load_task(run.data, BatchSpec(8), seed=0).record["path"] == cached_corpus(spec)  # data.path "": the cache


def test_a_run_trains_reports_test_bleu_and_records_the_manifest(corpus, tmp_path, capsys):
    _, out, _ = corpus
    workdir = tmp_path / "run"
    assert common.run_cli(EXPERIMENT, ["prog", *TINY, f"--config.data.path={out}", f"--workdir={workdir}"]) == 0
    capsys.readouterr()
    summary = records.read_json(str(workdir / "summary.json"))
    with open(os.path.join(out, "manifest.json"), "rb") as f:
        assert summary["data"]["manifest_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert summary["data"]["path"] == os.path.abspath(out)
    log = records.read_jsonl(str(workdir / "metrics.jsonl"))
    assert summary["final"]["valid/nll"] < log[0]["valid/nll"] - 0.5  # it learns
    assert 0 <= summary["final"]["test/bleu"] <= 100 and "valid/bleu" not in summary["final"]
    config = json.loads((workdir / "config.json").read_text())
    assert config["data"]["task"] == "gettext" and config["model"]["vocab_size"] == summary["data"]["vocab_size"]


def test_too_few_pairs_is_one_data_error_line_and_nothing_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NORMJAX_CACHE", str(tmp_path / "cache"))
    prefix = write_catalogs(tmp_path / "prefix", n=40)
    args = ["prog", *TINY, f"--config.data.catalog_prefixes={prefix}", f"--workdir={tmp_path / 'run'}"]
    assert common.run_cli(EXPERIMENT, args) == 2
    err = capsys.readouterr().err.strip()
    folder = os.path.join(os.path.realpath(os.path.join(prefix, "share", "locale")), "de", "LC_MESSAGES")
    assert err == f"data error: found 40 de-en translation pairs (need 1000) in 1 .mo catalogs under {folder}"
    assert not (tmp_path / "run").exists() and not os.listdir(tmp_path / "cache")  # no run, no half-built corpus


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"path": "{tmp}"}, ["config.data.path", "manifest.json", "normjax.train.data_gettext"]),
        ({"path": "{corpus}", "catalog_prefixes": ("/usr",)}, ["catalog_prefixes", "give one of the two"]),
        ({"src_lang": "en"}, ["src_lang and tgt_lang are both 'en'"]),
        ({"bpe_vocab_size": 4}, ["config.data.bpe_vocab_size=4"]),
    ],
)
def test_config_errors(corpus, tmp_path, data, words):
    values = {k: v.format(tmp=tmp_path, corpus=corpus[1]) if isinstance(v, str) else v for k, v in data.items()}
    with pytest.raises(ConfigError) as e:
        parse({"data": {"task": "gettext"} | values})
    assert all(w in str(e.value) for w in words)


def test_a_sweep_shares_shapes_across_lrs(corpus, tmp_path):
    _, out, manifest = corpus
    config = {
        "model": {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1},
        "data": {"task": "gettext", "path": out, "max_len": 24},
        "train": {"max_tokens": 64, "num_steps": 6, "warmup_steps": 2, "schedule": "warmup_then_inverse_sqrt",
                  "log_every": 3, "eval_every": 6, "checkpoint_every": 6, "bleu_examples": 4, "diag_every": 0},
        "sweep": {"axes": {"train.lr": [1e-3, 3e-3]}, "vmap": True},
    }  # fmt: skip
    runs = expand(config)
    assert len({r.run.data for r in runs}) == 1
    result = run_sweep(runs, str(tmp_path), vmap=True, progress=False)
    summaries = [r["summary"] for r in result["runs"]]
    assert [r["status"] for r in result["runs"]] == ["done", "done"]
    assert {s["data"]["manifest_sha256"] for s in summaries} == {summaries[0]["data"]["manifest_sha256"]}
    assert summaries[0]["final"]["train/loss"] != summaries[1]["final"]["train/loss"]
    assert all(np.isfinite(s["final"]["test/bleu"]) for s in summaries) and manifest["pairs"]["test"] > 0
