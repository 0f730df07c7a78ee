"""Synthetic task determinism and structure, batching invariants, local text loaders on test files."""

import hashlib
import platform

import numpy as np
import pytest

from normjax.train import data_text
from normjax.train.batching import BatchSpec, LMBatches, Seq2SeqBatches
from normjax.train.data_synthetic import SyntheticSpec, make_synthetic
from normjax.train.vocab import BOS, EOS, PAD, UNK, Vocab

SMALL = SyntheticSpec(seed=3, num_train=2000, num_valid=50, num_test=50, max_len=40)


def test_synthetic_is_deterministic_per_seed():
    vocab, splits = make_synthetic(SMALL)
    make_synthetic.cache_clear()
    vocab2, splits2 = make_synthetic(SMALL)
    assert vocab == vocab2
    for name in ("train", "valid", "test"):
        assert all(
            np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            for a, b in zip(splits[name], splits2[name], strict=True)
        )
    _, other = make_synthetic(SyntheticSpec(seed=4, num_train=2000, num_valid=50, num_test=50))
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(splits["train"], other["train"], strict=True))


def test_synthetic_sizes_and_lexicon_structure():
    vocab, splits = make_synthetic(SMALL)
    assert [len(splits[k]) for k in ("train", "valid", "test")] == [2000, 50, 50]
    words = lambda ids: [vocab.tokens[i] for i in ids]
    adjective_map = {}
    for src, tgt in splits["train"]:
        assert 0 < len(src) < SMALL.max_len and 0 < len(tgt) < SMALL.max_len
        s, t = words(src), words(tgt)
        assert all(w[0].islower() for w in s) and all(w[0].isupper() for w in t)  # disjoint sides
        src_adj = [w for w in s if w.startswith("a") and w != "and"]
        tgt_adj = [w for w in t if w.startswith("A")]
        assert len(src_adj) == len(tgt_adj)  # adjectives translate one to one
        if len(src_adj) == 1:  # ... through a fixed lexicon
            assert adjective_map.setdefault(src_adj[0], tgt_adj[0]) == tgt_adj[0]
        if not any(w in ("and", "but", "because") for w in s):
            assert t[-1].startswith("V") or (t[-1] == "PL" and t[-2].startswith("V"))  # verb-final
    assert len(adjective_map) > 10


def _pairs():
    rng = np.random.default_rng(0)
    return [(rng.integers(4, 50, rng.integers(1, 20)), rng.integers(4, 50, rng.integers(1, 20))) for _ in range(203)]


def test_seq2seq_batches_cover_each_pair_once_with_fixed_shapes():
    pairs = _pairs()
    spec = BatchSpec(batch_size=16, buckets=(8, 16, 24))
    batches = Seq2SeqBatches(pairs, spec, seed=1)
    seen, shapes = [], set()
    for pos in range(batches.batches_per_epoch):
        b = batches.batch(pos)
        shapes.add(b["src"].shape)
        seen += batches.example_indices(pos).tolist()
        real = b["tgt_mask"]
        np.testing.assert_array_equal(b["tgt_in"][:, 1:][real[:, 1:]], b["tgt_out"][:, :-1][real[:, 1:]])
        assert (b["tgt_in"][real.any(1), 0] == BOS).all()
        for row in range(real.shape[0]):
            n_src, n_tgt = b["src_mask"][row].sum(), real[row].sum()
            if n_src:
                assert b["src"][row, n_src - 1] == EOS and b["tgt_out"][row, n_tgt - 1] == EOS
        assert (b["src"][~b["src_mask"]] == PAD).all()
    assert sorted(seen) == list(range(len(pairs)))
    assert shapes <= {(16, 8), (16, 16), (16, 24)}
    again = Seq2SeqBatches(pairs, spec, seed=1)
    for pos in (0, 5, batches.batches_per_epoch + 3):
        for k, v in batches.batch(pos).items():
            np.testing.assert_array_equal(v, again.batch(pos)[k])
    n = batches.batches_per_epoch
    assert [batches.example_indices(p).tolist() for p in range(n)] != [
        batches.example_indices(n + p).tolist() for p in range(n)
    ]  # a new order each epoch


def test_token_budget_rows_are_a_multiple_of_devices():
    spec = BatchSpec(max_tokens=200, buckets=(8, 16), row_multiple=4)
    assert spec.rows(8) == 24 and spec.rows(16) == 12 and spec.rows(1000) == 4


def test_lm_batches_targets_are_next_tokens():
    stream = np.arange(1000, dtype=np.int32) % 97 + 4
    train = LMBatches(stream, 16, BatchSpec(batch_size=4), seed=0)
    b = train.batch(3)
    np.testing.assert_array_equal(b["tokens"][:, 1:], b["targets"][:, :-1])
    assert b["tokens"].shape == (4, 16) and b["mask"].all()
    valid = LMBatches(stream, 16, BatchSpec(batch_size=4), shuffle=False)
    tokens = np.concatenate([v["tokens"][v["mask"][:, 0]] for v in valid.epoch()])
    np.testing.assert_array_equal(tokens.reshape(-1), stream[: tokens.size])


def test_byte_corpus_from_a_folder(tmp_path):
    for i in range(4):
        (tmp_path / f"m{i}.py").write_bytes(f"x = {i}\n".encode())
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "skip.py").write_text("ignored")
    corpus = data_text.load_byte_corpus(str(tmp_path), ".py", max_bytes=10**6, valid_every=2)
    expected = lambda names: np.concatenate(
        [np.append(np.frombuffer((tmp_path / n).read_bytes(), np.uint8) + data_text.BYTE_OFFSET, EOS) for n in names]
    )
    np.testing.assert_array_equal(corpus["train"], expected(["m0.py", "m2.py"]))
    np.testing.assert_array_equal(corpus["valid"], expected(["m1.py", "m3.py"]))
    assert len(data_text.byte_vocab()) == 256 + data_text.BYTE_OFFSET


def test_byte_corpus_stops_at_max_bytes_and_its_record_hashes_the_bytes_used(tmp_path, monkeypatch):
    texts = {f"m{i}.py": (f"# file {i}\n" * 40).encode() for i in range(3)}
    for name, text in texts.items():
        (tmp_path / name).write_bytes(text)
    used = texts["m0.py"] + texts["m1.py"][:50]
    max_bytes = len(used)
    reads = []
    real_open = open

    def spy(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        if "b" in mode:
            real_read = f.read
            f.read = lambda n=-1: reads.append(n) or real_read(n)
        return f

    monkeypatch.setattr("builtins.open", spy)
    corpus = data_text.load_byte_corpus(str(tmp_path), ".py", max_bytes=max_bytes, valid_every=2)
    assert reads and all(0 < n <= max_bytes for n in reads)  # never a whole-file read past the budget
    assert corpus["train"].size + corpus["valid"].size == max_bytes + 2  # two files, each with its eos
    np.testing.assert_array_equal(
        corpus["valid"][:-1], np.frombuffer(texts["m1.py"][:50], np.uint8) + data_text.BYTE_OFFSET
    )
    record = data_text.byte_corpus_record(str(tmp_path), ".py", max_bytes=max_bytes)
    assert record == {
        "sha256": hashlib.sha256(used).hexdigest(),
        "num_bytes": max_bytes,
        "files": 2,
        "python_version": platform.python_version(),
    }
    assert data_text.byte_corpus_record(str(tmp_path), ".py", max_bytes=max_bytes + 1)["sha256"] != record["sha256"]
    with pytest.raises(data_text.DataError, match="max_bytes=10"):
        data_text.load_byte_corpus(str(tmp_path), ".py", max_bytes=10)


def _write_parallel(folder, lines_de, lines_en):
    for split in ("train", "valid", "test"):
        (folder / f"{split}.de").write_text("\n".join(lines_de) + "\n")
        (folder / f"{split}.en").write_text("\n".join(lines_en) + "\n")


def test_iwslt_style_parallel_files(tmp_path):
    de = ["das ist gut", "das haus@@ chen ist alt", "selten"]
    en = ["this is good", "the little hou@@ se is old", "rare"]
    _write_parallel(tmp_path, de, en)
    vocab, splits, refs = data_text.load_parallel(str(tmp_path), min_count=2)
    assert vocab.tokens[:4] == ("<pad>", "<s>", "</s>", "<unk>")
    assert set(vocab.tokens[4:]) == {"das", "ist", "is"}  # the only words seen twice
    assert splits["train"][0][0].tolist() == vocab.encode("das ist").tolist() + [UNK]
    assert refs["valid"][1] == "the little house is old"
    full, _, _ = data_text.load_parallel(str(tmp_path), min_count=1)
    assert full.decode(full.encode("hou@@ se is"), strip_bpe=True) == "house is"
    (tmp_path / "test.en").write_text("one line\n")
    with pytest.raises(ValueError, match="test.de"):
        data_text.load_parallel(str(tmp_path))


def test_vocab_rejects_missing_specials():
    with pytest.raises(ValueError):
        Vocab(("a", "b"))
