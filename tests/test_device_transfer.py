"""Group folders across machines (accelerator_groups.transfer, scripts/device_groups.sh): the data copy a device
reads, the one archive it returns, and the merge here, hostile archives included."""

import dataclasses
import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from normjax.io import write_json
from normjax.studies.accelerator_groups import transfer
from normjax.train import data_gettext, data_text

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _corpus(folder: pathlib.Path) -> pathlib.Path:
    """A small corpus with a skipped folder, an empty file and files in two folders."""
    for name, text in {
        "a.py": "x = 1\n" * 50,
        "pkg/b.py": "def f():\n    return 2\n" * 40,
        "pkg/empty.py": "",
        "test/skipped.py": "no\n" * 10,
        "z.py": "y = 'z'\n" * 60,
    }.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_the_copied_byte_corpus_gives_the_same_ids_at_every_smaller_max_bytes(tmp_path):
    source = _corpus(tmp_path / "src")
    record = data_text.copy_byte_corpus(str(tmp_path / "copy"), str(source), ".py", max_bytes=1500)
    assert record["sha256"] == data_text.byte_corpus_record(str(source), ".py", 1500)["sha256"]
    assert not (tmp_path / "copy" / "test").exists() and (tmp_path / "copy" / "pkg" / "empty.py").exists()
    assert (tmp_path / "copy" / "z.py").stat().st_size < (source / "z.py").stat().st_size  # cut at 1500 bytes in all
    for max_bytes in (400, 1200, 1500):
        a = data_text.load_byte_corpus(str(source), max_bytes=max_bytes, valid_every=2)
        b = data_text.load_byte_corpus(str(tmp_path / "copy"), max_bytes=max_bytes, valid_every=2)
        assert all(np.array_equal(a[k], b[k]) for k in ("train", "valid")), max_bytes


def test_the_byte_corpus_variable_stands_in_for_the_stdlib(tmp_path, monkeypatch):
    source = _corpus(tmp_path / "src")
    monkeypatch.setenv(data_text.BYTE_CORPUS_ENV, str(source))
    assert data_text.byte_corpus_record()["sha256"] == data_text.byte_corpus_record(str(source))["sha256"]
    monkeypatch.setenv(data_text.BYTE_CORPUS_ENV, str(tmp_path / "missing"))
    with pytest.raises(data_text.DataError, match=r"^\$NORMJAX_BYTE_CORPUS=.*missing.* is not a folder"):
        data_text.load_byte_corpus()


def test_a_carried_gettext_corpus_must_have_the_runs_settings(tmp_path, monkeypatch):
    spec = data_gettext.CorpusSpec(vocab_size=2000)
    folder = tmp_path / "gettext"
    folder.mkdir()
    settings = json.loads(json.dumps(dataclasses.asdict(spec)))
    (folder / data_gettext.MANIFEST).write_text(json.dumps({"settings": settings}))
    monkeypatch.setenv(data_gettext.CORPUS_ENV, str(folder))
    assert data_gettext.cached_corpus(spec) == str(folder)  # no catalog of this machine read
    with pytest.raises(data_text.DataError, match="other settings than the run's: vocab_size"):
        data_gettext.cached_corpus(data_gettext.CorpusSpec(vocab_size=8000))
    (folder / data_gettext.MANIFEST).write_text("{not json")
    with pytest.raises(data_text.DataError, match="is not a corpus manifest"):
        data_gettext.cached_corpus(spec)


def _group(top: pathlib.Path, name: str, done: list[str], tiny: bool = True) -> pathlib.Path:
    """A group folder as a run leaves it: its record, a sweep.json, run folders with checkpoints and locks."""
    folder = top / "accelerator_groups" / name
    folder.mkdir(parents=True)
    write_json(str(folder / "group.json"), {"group": name, "tiny": tiny, "data": None})
    runs = [{"name": n, "status": "done"} for n in done] + [{"name": "cut", "status": "pending"}]
    write_json(str(folder / "sweep.json"), {"runs": runs})
    for run in [*done, "cut"]:
        (folder / run / "checkpoints" / "3").mkdir(parents=True)
        (folder / run / "checkpoints" / "3" / "state").write_bytes(b"\0" * 1000)
        (folder / run / "metrics.jsonl").write_text('{"step": 0}\n')
        (folder / run / ".lock").write_text("")
    (folder / ".sweep.lock").write_text("")
    return folder


def test_pack_keeps_finished_runs_and_records_without_checkpoints_or_locks(tmp_path):
    _group(tmp_path / "work", "s5_post", ["r0", "r1"])
    archive = tmp_path / "out" / "groups.tar.gz"
    assert transfer.pack(str(tmp_path / "work"), str(archive)) == {"s5_post": 2}
    with tarfile.open(archive) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    top = "accelerator_groups/s5_post/"
    assert names == [top + f for f in ("group.json", "r0/metrics.jsonl", "r1/metrics.jsonl", "sweep.json")]
    assert os.listdir(tmp_path / "out") == ["groups.tar.gz"]  # one file: what a device call returns
    with pytest.raises(transfer.TransferError, match="over 0: accelerator_groups/s5_post/"):
        transfer.pack(str(tmp_path / "work"), str(archive), limit=10)
    with pytest.raises(transfer.TransferError, match="holds no group folder"):
        transfer.pack(str(tmp_path / "empty"), str(archive))
    sweep = tmp_path / "work" / "accelerator_groups" / "s5_post" / "sweep.json"
    sweep.write_text(sweep.read_text()[:-20])  # damaged: which runs finished is unknown
    with pytest.raises(transfer.TransferError, match="group s5_post: .*sweep.json"):
        transfer.pack(str(tmp_path / "work"), str(archive))


def test_merge_replaces_a_group_with_its_newer_state_and_refuses_to_drop_runs(tmp_path):
    _group(tmp_path / "device", "s5_post", ["r0", "r1"])
    archive = str(tmp_path / "groups.tar.gz")
    transfer.pack(str(tmp_path / "device"), archive)
    here = tmp_path / "here"
    _group(here, "s5_post", ["r0"])  # the committed state the device call started from
    assert transfer.merge(archive, str(here), tiny=True) == {"s5_post": 2}
    folder = here / "accelerator_groups" / "s5_post"
    assert sorted(os.listdir(folder)) == ["group.json", "r0", "r1", "sweep.json"]
    assert [p for p in os.listdir(here / "accelerator_groups") if p.startswith(".tmp-")] == []
    older = tmp_path / "older"
    _group(older, "s5_post", ["r0", "r1", "r2"])
    with pytest.raises(transfer.TransferError, match=r"would drop 1 finished runs .* \(e.g. r2\)"):
        transfer.merge(archive, str(older), tiny=True)
    assert (older / "accelerator_groups" / "s5_post" / "r2").exists()
    with pytest.raises(transfer.TransferError, match="holds the tiny group s5_post: merge it with --tiny"):
        transfer.merge(archive, str(tmp_path / "fresh"))


def _archive(path: pathlib.Path, members: list[tuple[str, bytes | None, bytes]]) -> str:
    """A .tar.gz of (name, link target or None, bytes) members."""
    with tarfile.open(path, "w:gz") as tar:
        for name, link, data in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize(
    "members, why",
    [
        ([("accelerator_groups/s5_post/../../evil", None, b"x")], "is not a path under accelerator_groups/<GROUP>/"),
        ([("/etc/evil", None, b"x")], "is not a path under"),
        ([("accelerator_groups/nope/group.json", None, b"{}")], "is not a path under"),
        ([("accelerator_groups/s5_post/group.json", b"/etc/passwd", b"")], "is a link or a device"),
        ([("accelerator_groups/s5_post/sweep.json", None, b"{}")], "has no readable group.json"),
    ],
)
def test_merge_refuses_a_hostile_archive_and_changes_nothing(tmp_path, members, why):
    archive = _archive(tmp_path / "bad.tar.gz", members)
    with pytest.raises(transfer.TransferError, match=why):
        transfer.merge(archive, str(tmp_path / "work"), tiny=True)
    assert os.listdir(tmp_path / "work" / "accelerator_groups") == [".lock"]  # the merge's lock, no group
    assert not (tmp_path / "evil").exists()


def test_merge_refuses_a_damaged_or_missing_archive(tmp_path):
    _group(tmp_path / "device", "s5_post", ["r0"])
    archive = tmp_path / "groups.tar.gz"
    transfer.pack(str(tmp_path / "device"), str(archive))
    archive.write_bytes(archive.read_bytes()[:-40])  # cut short, as by a broken transfer
    for path in (archive, tmp_path / "absent.tar.gz"):
        with pytest.raises(transfer.TransferError, match="is not a whole group archive"):
            transfer.merge(str(path), str(tmp_path / "work"), tiny=True)


def _script(*args, **env):
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_groups.sh"), *args],
        env={k: v for k, v in os.environ.items() if k != "OUT"} | {"PYTHON": sys.executable} | env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_device_script_says_what_it_needs(tmp_path):
    assert _script().returncode == 2  # usage
    no_out = _script("s5_post")
    assert no_out.returncode != 0 and "set OUT to the folder for the archive" in no_out.stderr
    bad = _script("merge", str(tmp_path / "absent.tar.gz"), "--tiny", WORKDIR=str(tmp_path / "w"))
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: ") and len(bad.stderr.splitlines()) == 1


@pytest.mark.slow
def test_a_cut_off_group_goes_on_in_a_fresh_workdir_from_the_archive(tmp_path):
    """Machine A trains s5_post and is cut off in s5_pre; its archive merged into machine B's empty workdir;
    B skips s5_post's finished runs and trains s5_pre from step 0."""
    env = os.environ | {"PYTHON": sys.executable, "JAX_PLATFORMS": "cpu"}
    check = [str(ROOT / "scripts" / "accelerator_check.sh")]
    a, b, archive = tmp_path / "a", tmp_path / "b", tmp_path / "out" / "groups.tar.gz"

    def run(*args):
        return subprocess.run(["bash", *check, *args], env=env, capture_output=True, text=True, timeout=600)

    first = run("s5_post", "s5_pre", "--tiny", f"--workdir={a}", "--budget_s=0.01", f"--pack={archive}")
    assert first.returncode == 3 and "packed" in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
    done = run("s5_post", "--tiny", f"--workdir={a}", f"--pack={archive}")
    assert done.returncode == 0 and "s5_post (4 finished)" in done.stdout, done.stderr[-2000:]
    merged = run(f"--merge={archive}", "--tiny", f"--workdir={b}")
    assert merged.returncode == 0 and "merged: s5_post (4 finished)" in merged.stdout, merged.stderr[-2000:]
    summaries = {p: p.stat().st_mtime_ns for p in (b / "accelerator_groups" / "s5_post").glob("*/summary.json")}
    assert len(summaries) == 4
    go_on = run("s5_post", "s5_pre", "--tiny", f"--workdir={b}")
    assert go_on.returncode == 0, go_on.stdout[-2000:] + go_on.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in summaries} == summaries  # finished runs were not trained again
    results = json.loads((b / "accelerator_groups" / "results.json").read_text())["results"]["groups"]
    assert results["s5_post"]["done"] == results["s5_pre"]["done"] == 4
