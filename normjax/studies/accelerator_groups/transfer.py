"""Group folders across machines: the data a device reads (prepare), one archive back (pack), merged here (merge).

`prepare` copies the data the groups read on this machine (the stdlib bytes of the byte LM, the gettext De-En
corpus) into a folder that travels with the working tree; scripts/device_groups.sh points NORMJAX_BYTE_CORPUS and
NORMJAX_GETTEXT_CORPUS at it, so a device whose Python (another stdlib) and catalogs differ trains on the same
bytes (each run records their sha256).

A lent device returns at most 8 files of $OUT, none more than two folders down and none over 16 MiB
(/work/.library/device/README.md), and starts bare: a group's run folders (WORKDIR/accelerator_groups/<GROUP>/
<run>/metrics.jsonl) would not come back as they are. `pack` writes one .tar.gz of every group folder of a workdir
without the checkpoints (a 12-layer d-128 run's is about 19 MB: they cannot travel), `merge` unpacks one into a
workdir here. A group's finished runs travel; a run cut off mid-way does not (its folder is left out, so the next
machine trains it from step 0); a study group's cached pieces travel, so it resumes piece by piece.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile

from normjax.io import CorruptFileError, FolderLock, read_json, write_bytes
from normjax.studies.accelerator_groups.groups import GROUPS, StudyGroup
from normjax.studies.accelerator_groups.measure import RECORD, read_record

ROOT = "accelerator_groups"  # the archive's top folder, as in a workdir
LIMIT_BYTES = 16 * 2**20  # the largest file a device call returns
SKIP = ("checkpoints",)  # names left out of an archive (and every lock file, every .tmp- file)


class TransferError(ValueError):
    """An archive that cannot be packed or merged as it is; says why in one line."""


def prepare(folder: str) -> dict:
    """FOLDER/bytes: the byte corpus as the groups read it here (enough for the largest max_bytes of any group);
    FOLDER/gettext: the translation group's corpus, built here from this machine's catalogs. Returns
    {"bytes": the copy's byte_corpus_record, "gettext": its manifest's sha256}.

    Raises:
      TransferError: FOLDER exists (prepare into a new folder), or the copy's bytes differ from the source's.
    """
    from normjax import train
    from normjax.studies.accelerator_groups.groups import group_config, study_config
    from normjax.train import data_gettext, data_text
    from normjax.train.config_io import gettext_spec

    if os.path.lexists(folder):
        raise TransferError(f"{folder} exists: prepare into a new folder (remove the old one first)")
    budgets, spec = [], None
    for name, group in GROUPS.items():
        if isinstance(group, StudyGroup):
            config = study_config(name)
            budgets.append(config.get("max_bytes") or config.data.max_bytes)
            continue
        data = train.expand(group_config(name))[0].run.data
        if data.task == "gettext":
            spec = gettext_spec(data)
        else:
            budgets.append(data.max_bytes)
    source = data_text.byte_corpus_record("", ".py", max(budgets))
    copied = data_text.copy_byte_corpus(os.path.join(folder, "bytes"), "", ".py", max(budgets))
    if copied["sha256"] != source["sha256"]:
        raise TransferError(f"{folder}/bytes holds other bytes than the corpus it copies (sha256 differs)")
    shutil.copytree(data_gettext.cached_corpus(spec), os.path.join(folder, "gettext"))
    manifest = os.path.join(folder, "gettext", data_gettext.MANIFEST)
    return {"bytes": copied, "gettext": hashlib.sha256(data_gettext.read_bytes(manifest)).hexdigest()}


def _done_runs(folder: str) -> set[str]:
    """The names of FOLDER's finished runs (a sweep group's sweep.json), or {"results"} for a study group's
    results; empty when it holds neither."""
    sweep = os.path.join(folder, "sweep.json")
    if os.path.exists(sweep):
        return {e["name"] for e in read_json(sweep).get("runs", []) if e.get("status") == "done"}
    study = GROUPS.get(os.path.basename(folder))
    if isinstance(study, StudyGroup) and os.path.exists(os.path.join(folder, study.study, "results.json")):
        return {"results"}
    return set()


def _kept(relative: str, done: set[str], sweep: bool) -> bool:
    parts = relative.split(os.sep)
    if any(p in SKIP or p.endswith(".lock") or p.startswith(".tmp-") for p in parts):
        return False
    return not (sweep and len(parts) > 1 and parts[0] not in done)  # a sweep group's unfinished run: left out


def pack(workdir: str, archive: str, limit: int = LIMIT_BYTES) -> dict:
    """Writes ARCHIVE (.tar.gz) of every group folder under WORKDIR/accelerator_groups/ (their records, finished
    runs and study pieces; no checkpoints). Returns {group: finished runs}.

    Raises:
      TransferError: no group folder there, a damaged sweep.json, or the archive over `limit` bytes (naming its
        largest files).
    """
    top = os.path.join(workdir, ROOT)
    names = sorted(n for n in GROUPS if os.path.isfile(os.path.join(top, n, RECORD)))
    if not names:
        raise TransferError(f"{top} holds no group folder (no {RECORD}): nothing to pack")
    sizes, packed = [], {}
    buffer = io.BytesIO()  # built in memory, then written atomically (write_bytes)
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as stream, tarfile.TarFile(fileobj=stream, mode="w") as tar:
        for name in names:
            folder = os.path.join(top, name)
            try:
                done = _done_runs(folder)
            except CorruptFileError as e:  # its runs' record damaged: which runs are finished is unknown
                raise TransferError(f"group {name}: {e}") from None
            sweep = not isinstance(GROUPS[name], StudyGroup)
            for base, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if _kept(os.path.relpath(os.path.join(base, d), folder), done, sweep))
                for file in sorted(files):
                    path = os.path.join(base, file)
                    if os.path.islink(path) or not _kept(os.path.relpath(path, folder), done, sweep):
                        continue
                    tar.add(path, arcname=os.path.relpath(path, workdir), recursive=False)
                    sizes.append((os.path.getsize(path), os.path.relpath(path, workdir)))
            packed[name] = len(done)
    if buffer.tell() > limit:
        largest = ", ".join(f"{p} ({s / 2**20:.1f} MiB)" for s, p in sorted(sizes, reverse=True)[:3])
        raise TransferError(f"the archive is {buffer.tell() / 2**20:.1f} MiB, over {limit / 2**20:.0f}: {largest}")
    write_bytes(archive, buffer.getvalue())
    return packed


def _members(tar: tarfile.TarFile, archive: str) -> dict[str, list[tarfile.TarInfo]]:
    """The archive's members by group, each a plain file or folder under accelerator_groups/<GROUP>/."""
    groups: dict[str, list[tarfile.TarInfo]] = {}
    for member in tar.getmembers():
        parts = member.name.split("/")
        if parts[0] != ROOT or len(parts) < 3 or parts[1] not in GROUPS or {"", ".", ".."} & set(parts):
            raise TransferError(f"{archive}: {member.name!r} is not a path under {ROOT}/<GROUP>/ of a known group")
        if not (member.isfile() or member.isdir()):
            raise TransferError(f"{archive}: {member.name!r} is a link or a device, not a file")
        groups.setdefault(parts[1], []).append(member)
    if not groups:
        raise TransferError(f"{archive} holds no group")
    return groups


def merge(archive: str, workdir: str, tiny: bool = False) -> dict:
    """Unpacks ARCHIVE (from `pack`) into WORKDIR/accelerator_groups/: each group in it replaces the folder of the
    same name, which must hold no finished run the archive lacks (the archive is the newer state: a device call
    starts from the committed folders). Groups at their tiny size (a test) are merged only when `tiny`, full-size
    ones only when not. Returns {group: finished runs}.

    Raises:
      TransferError: a damaged archive, a member outside a known group's folder, a link, a group of the other
        size than `tiny`, or a group folder here whose finished runs the archive would drop.
      WorkdirError: WORKDIR/accelerator_groups is in use (another merge, or the groups being judged).
    """
    top = os.path.join(workdir, ROOT)
    with FolderLock(top):  # the study's own lock: no second merge, no judging of the groups meanwhile
        return _merge(archive, top, tiny)


def _merge(archive: str, top: str, tiny: bool) -> dict:
    scratch = tempfile.mkdtemp(prefix=".tmp-merge-", dir=top)
    try:
        try:
            with tarfile.open(archive, mode="r:gz") as tar:
                groups = _members(tar, archive)
                tar.extractall(scratch, members=[m for ms in groups.values() for m in ms], filter="data")
        except (tarfile.TarError, EOFError, OSError) as e:
            raise TransferError(f"{archive} is not a whole group archive ({type(e).__name__}: {e})") from None
        merged = {}
        for name in sorted(groups):
            new, old = os.path.join(scratch, ROOT, name), os.path.join(top, name)
            try:
                record_tiny, done = read_record(new)["tiny"], _done_runs(new)
            except (CorruptFileError, OSError) as e:
                raise TransferError(f"{archive}: group {name} has no readable {RECORD} or sweep.json ({e})") from None
            if record_tiny != tiny:
                size, flag = ("tiny", "with --tiny") if record_tiny else ("full-size", "without --tiny")
                raise TransferError(f"{archive} holds the {size} group {name}: merge it {flag}")
            if os.path.exists(os.path.join(old, RECORD)) and read_record(old)["tiny"] != tiny:
                raise TransferError(f"{old} holds group {name} at the other size: merge into another workdir")
            if lost := sorted(_done_runs(old) - done) if os.path.isdir(old) else []:
                raise TransferError(f"{archive} would drop {len(lost)} finished runs of {old} (e.g. {lost[0]})")
            merged[name] = (new, old, len(done))
        for name, (new, old, _) in merged.items():
            if os.path.isdir(old):  # set aside into the scratch folder (removed below): a cut here loses nothing
                os.replace(old, os.path.join(scratch, f"replaced-{name}"))  # the archive holds all of it
            os.replace(new, old)
        return {name: done for name, (_, _, done) in merged.items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
