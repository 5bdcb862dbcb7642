"""HDF5 checkpoints: consistent cuts of every rank's state, for exactly-once restart.

A checkpoint is a directory ckpt-<id>/ with one HDF5 file per rank (its window and strategy
state: named arrays plus JSON attributes) and MANIFEST.json, written last and atomically by the
master once every rank has written its file. The manifest records the input offset (tuples
released before the cut), how far the ledger of committed result files went at the cut
(ledger.py: each cut appends the files it commits), the number of ranks and a fingerprint of the
job configuration. A checkpoint without a manifest is incomplete and ignored.

The cut itself is made by markers that travel with the data: the master sends a CHECKPOINT
marker on each slave's channel right after the last epoch before the cut, so every rank saves
exactly the state that follows that epoch (the `hash` strategy's epoch boundary; ring and chain
strategies forward the same marker to their neighbours).
"""
import glob
import hashlib
import json
import os
import shutil
import time

import numpy as np

from .durable import write_json
from ..errors import ConfigError, InputError
from .checksums import array_sha256, verify_part, verify_snapshots

FORMAT = "mpi-join-checkpoint/2"     # /2: 1-d arrays packed, one dataset per dtype
MANIFEST = "MANIFEST.json"


def fingerprint(job):
    """What a checkpoint's state depends on: streams, windows, predicate, strategy parameters
    (testing knobs such as fault injection excepted: a resumed run may drop them)."""
    from .. import strategies
    params = strategies.get(job.strategy.name).params
    desc = {
        "ts_unit": job.ts_unit,
        "streams": [[s.name, s.schema, s.window.kind, s.window.size] for s in job.streams],
        "predicate": repr(job.predicate) + "".join(repr(x) for x in (job.predicate.interval, job.predicate.outer) if x),
        "strategy": [job.strategy.name, {k: v for k, v in sorted(job.strategy.params.items()) if not (k in params and params[k].testing)}],
    }
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ckpt_path(root, cid):
    return os.path.join(root, f"ckpt-{cid:06d}")


def rank_file(root, cid, rank):
    return os.path.join(ckpt_path(root, cid), f"rank-{rank:04d}.h5")


def _binding(cid, rank, cut):
    """What ties a rank file to its place: checkpoint id, rank and the cut's identity (a nonce
    the driver draws per cut), under the file's checksums."""
    return hashlib.sha256(f"{FORMAT}|{int(cid)}|{int(rank)}|{cut}".encode()).hexdigest()


def write_rank(root, cid, rank, arrays, attrs, cut=""):
    """Write one rank's state: `arrays` {name: ndarray} and JSON-able `attrs`, bound to checkpoint
    `cid`, `rank` and the cut `cut`. Atomic rename. Returns the file's digest (the SHA-256 of its
    checksums), which the manifest records. The HDF5 file is built in memory and written by
    Python: a full disk is then one OSError (ENOSPC) here, where HDF5 writing to disk itself
    crashed the process as it closed the failed file."""
    import io
    import h5py
    path = rank_file(root, cid, rank)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    image = io.BytesIO()
    with h5py.File(image, "w") as f:
        f.attrs["format"] = FORMAT
        f.attrs["rank"] = rank
        f.attrs["checkpoint"] = cid
        f.attrs["cut"] = cut
        state = json.dumps(attrs)
        f.attrs["state"] = state
        g = f.create_group("arrays")
        sums = {"state": hashlib.sha256(state.encode()).hexdigest(), "binding": _binding(cid, rank, cut)}
        # the 1-d arrays of one dtype as one dataset, sliced again by the index: a dataset each
        # (a window's 120 key groups) was most of a rank's checkpoint, 4 times a second
        packed, index = {}, []
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            sums["arrays/" + name] = array_sha256(a)
            if a.ndim != 1:
                g.create_dataset(name, data=a)
                continue
            same = packed.setdefault(a.dtype, [len(packed), 0, []])
            index.append([name, same[0], same[1], same[1] + len(a)])
            same[1] += len(a)
            same[2].append(a)
        for dt, (i, _, parts) in packed.items():
            f.create_dataset(f"packed/{i}", data=np.concatenate(parts) if len(parts) > 1 else parts[0])
        f.attrs["packed"] = json.dumps(index)
        text = json.dumps(sums, sort_keys=True)
        f.attrs["sha256"] = text
    try:
        with open(tmp, "wb") as out:
            out.write(image.getbuffer())
    except OSError as e:
        if os.path.lexists(tmp):
            os.remove(tmp)                    # what part of it was written (inside this checkpoint)
        if e.filename:
            raise
        raise type(e)(e.errno, e.strerror, tmp) from e      # the one line names the file
    os.replace(tmp, path)
    return hashlib.sha256(text.encode()).hexdigest()


def _packed(f):
    """The packed arrays' index of an open rank file: [name, dataset, first row, end row]."""
    return json.loads(f.attrs.get("packed", "[]"))


def entries(f):
    """(name, dtype, rows or None for a scalar) of every array an open rank file holds, packed
    or not, without reading them (restore plans, `checkpoint inspect`)."""
    import h5py
    out = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out.append((name, obj.dtype, int(obj.shape[0]) if obj.shape else None))
    f["arrays"].visititems(visit)
    for name, i, lo, hi in _packed(f):
        out.append((name, f[f"packed/{i}"].dtype, hi - lo))
    return out


def one_array(f, name):
    """Array `name` of an open rank file (unchecked: read_rank checks), or None."""
    if name in f["arrays"]:
        return f["arrays"][name][()]
    for n, i, lo, hi in _packed(f):
        if n == name:
            return f[f"packed/{i}"][lo:hi]
    return None


def read_rank(root, cid, rank, expected=None, manifest=None, keep=None):
    """Read one rank's state, validating it. `expected(name, attrs)` gives the dtype the array
    `name` must have (None: the array should not be there). The file must belong where it lies:
    its checkpoint id, rank and cut are checked, under its checksums, and with `manifest` (the
    checkpoint's, read here if "auto") its digest must be the one the manifest recorded, so a
    rank file of another checkpoint or another run is refused. `keep(name)`: read (and check)
    only the arrays it accepts (a restore at another rank count takes some key groups of each
    file); the names of all are still checked against the file's checksums. Returns (arrays,
    attrs)."""
    import h5py
    path = rank_file(root, cid, rank)
    if not os.path.exists(path):
        raise InputError(f"{path}: checkpoint file of rank {rank} is missing")
    if manifest == "auto":
        manifest, why = manifest_of(root, cid)
        if manifest is None:
            raise InputError(f"{ckpt_path(root, cid)}: checkpoint {cid} is {why}")
    arrays = {}
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT or int(f.attrs.get("rank", -1)) != rank:
                raise InputError(f"{path}: not a checkpoint file of rank {rank} ({FORMAT})")
            written_in, cut = int(f.attrs.get("checkpoint", -1)), str(f.attrs.get("cut", ""))
            state = f.attrs["state"]
            sums_text = f.attrs["sha256"] if "sha256" in f.attrs else None
            sums = json.loads(sums_text) if sums_text is not None else None
            attrs = json.loads(state)

            names = []

            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    names.append(name)
                    if keep is None or keep(name):
                        arrays[name] = obj[()]
            f["arrays"].visititems(visit)
            whole = {}
            for name, i, lo, hi in _packed(f):
                names.append(name)
                if keep is None or keep(name):
                    if i not in whole:
                        whole[i] = f[f"packed/{i}"][()]
                    arrays[name] = whole[i][lo:hi].copy()
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - h5py raises OSError/KeyError/ValueError on damage
        raise InputError(f"{path}: damaged checkpoint file: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if sums is None:
        raise InputError(f"{path}: checkpoint file carries no checksums (written by an older mpi-join); "
                         f"it cannot be verified")
    if written_in != cid:
        raise InputError(f"{path}: rank file of checkpoint {written_in}, not of checkpoint {cid}; it was moved or copied here")
    if sums.get("binding") != _binding(cid, rank, cut):
        raise InputError(f"{path}: its checkpoint id, rank or cut fails its checksum; the file was changed")
    if manifest is not None:
        want = (manifest.get("rank_files") or {}).get(str(rank))
        if cut != manifest.get("cut") or want != hashlib.sha256(sums_text.encode()).hexdigest():
            raise InputError(f"{path}: not the rank file checkpoint {cid}'s manifest recorded (written for another "
                             f"cut); it was replaced")
    if hashlib.sha256(state.encode()).hexdigest() != sums.get("state"):
        raise InputError(f"{path}: checkpoint state attributes fail their checksum; the file was changed")
    summed = {k[7:] for k in sums if k.startswith("arrays/")}
    if summed != set(names):
        extra = sorted(set(names) ^ summed)
        raise InputError(f"{path}: array '{extra[0]}' is not what was written; the file was changed")
    for name, a in arrays.items():
        if array_sha256(a) != sums["arrays/" + name]:
            raise InputError(f"{path}: array '{name}' fails its checksum; the file was changed")
    for name, a in arrays.items():
        if expected is None:
            continue
        try:
            want = expected(name, attrs)
        except (KeyError, IndexError, TypeError, ValueError):
            want = None
        if want is None:
            raise InputError(f"{path}: unexpected array '{name}' in checkpoint")
        if a.dtype != want or a.ndim != 1:
            raise InputError(f"{path}: array '{name}' has dtype {a.dtype} and shape {a.shape}; "
                             f"this job needs a 1-d array of {want}")
    return arrays, attrs


def write_manifest(root, cid, info):
    """Mark checkpoint `cid` complete (written last, atomically)."""
    man = dict(info, format=FORMAT, checkpoint=cid, created=time.time())
    man["sha256"] = _manifest_sum(man)
    write_json(os.path.join(ckpt_path(root, cid), MANIFEST), man)
    return man


def _manifest_sum(man):
    body = {k: v for k, v in man.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def manifest_of(root, cid):
    """(manifest, None) for a complete checkpoint, (None, why) for one without a manifest or with
    a manifest that cannot be read or fails its own checksum."""
    mp = os.path.join(ckpt_path(root, cid), MANIFEST)
    if not os.path.exists(mp):
        return None, f"incomplete (no {MANIFEST})"
    try:
        with open(mp, "rb") as f:
            man = json.loads(f.read(256 << 20).decode("utf-8"))
    except (OSError, ValueError) as e:
        return None, f"its {MANIFEST} cannot be read ({str(e).splitlines()[0][:80]})"
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        return None, f"its {MANIFEST} is not a checkpoint manifest ({FORMAT})"
    if man.get("sha256") != _manifest_sum(man):
        return None, f"its {MANIFEST} fails its checksum (it was changed after it was written)"
    return man, None


def list_checkpoints(root):
    """[(id, manifest or None if incomplete or damaged)] sorted by id."""
    out = []
    for d in sorted(glob.glob(os.path.join(root, "ckpt-*"))):
        try:
            cid = int(os.path.basename(d)[5:])
        except ValueError:
            continue
        out.append((cid, manifest_of(root, cid)[0]))
    return out


def latest_complete(root, job, nranks, say=None, results_dir=None):
    """The newest complete checkpoint usable by this job on `nranks` ranks, verified, or a clear
    error. Verified means: the manifest passes its checksum; every rank file is present and its
    arrays pass theirs; every committed result file (in `results_dir`) has the rows, size and
    SHA-256 its writer recorded; and the staged input is the input the run read. A damaged
    newest checkpoint is skipped for the one before it with one line (`say`) giving the reason;
    changed input or another job's checkpoint is refused."""
    from .staged import hash_input
    say = say or (lambda m: None)
    if not os.path.isdir(root):
        raise InputError(f"{root}: checkpoint directory not found")
    ids = sorted((c for c, _ in list_checkpoints(root)), reverse=True)
    if not ids:
        raise InputError(f"{root}: no checkpoint (no ckpt-*/{MANIFEST})")
    fp = fingerprint(job)
    current = None
    reasons = []
    for cid in ids:
        man, why = manifest_of(root, cid)
        if man is not None:
            if man.get("fingerprint") != fp:
                raise ConfigError(f"{ckpt_path(root, cid)}: checkpoint was written by a different job configuration "
                                  f"(fingerprint {man.get('fingerprint')}, this job {fp}); resume with the job it came from")
            if man.get("ranks") != nranks:
                _rescalable(job, root, cid, man, nranks)
            recorded = man.get("input")
            if recorded is None:
                raise InputError(f"{ckpt_path(root, cid)}: checkpoint does not record the input it read (written by "
                                 f"an older mpi-join); it cannot be verified")
            if current is None:
                current = hash_input(job)
            _same_input(job, recorded, current)
            try:
                # every rank but the extra sources (the last ranks; rank 0 keeps their counts)
                for r in range(int(man["ranks"]) - (int(man.get("sources", 1)) - 1)):
                    read_rank(root, cid, r, manifest=man)   # present, unchanged, of this cut, before anyone starts
                committed = committed_files(root, man)
                man = dict(man, committed=committed)      # read once: the resume's caller keeps it
                if results_dir is not None:
                    for name, rec in sorted(committed.items()):
                        verify_part(os.path.join(results_dir, name), rec)
                    verify_snapshots(os.path.join(os.path.dirname(os.path.normpath(results_dir)), "aggregate"),
                                     man.get("snapshots") or {})
            except InputError as e:
                why = str(e)
            else:
                for r in reasons:
                    say(r)
                return cid, man
        reasons.append(f"mpi-join: skipping checkpoint {cid} in {root}: {why}")
    for r in reasons[:-1]:
        say(r)
    raise InputError(f"{root}: no usable checkpoint; the last one tried: {reasons[-1].split(': ', 2)[-1]}")


def committed_files(root, man):
    """{name: {rows, bytes, sha256}} of the result files checkpoint manifest `man` (of checkpoint
    directory `root`) committed: from the ledger (ledger.py), the prefix the manifest recorded,
    checked against its digest; InputError naming the ledger where it fails."""
    from . import ledger
    if "committed" in man:               # read already (latest_complete), or written by /2 before the ledger
        if set(man["committed"]) != set(man.get("committed_files", man["committed"])):
            raise InputError(f"{os.path.join(ckpt_path(root, int(man.get('checkpoint', 0))), MANIFEST)}: the manifest's committed files disagree with their records")
        return man["committed"]
    return ledger.read(root, man.get("ledger"))[0]


def _result_files(man):
    return man["ledger"]["entries"] if isinstance(man.get("ledger"), dict) else len(man.get("committed_files", []))


def rescaled(man, nranks, sources):
    """Is a restore of checkpoint manifest `man` onto `nranks` ranks with `sources` sources one
    onto another graph (another rank count or run.sources)? Then each worker takes its state out
    of the old workers' files (slaves/cuts.restore_rescaled) and rank 0 routes by it."""
    return int(man["ranks"]) != nranks or int(man.get("sources", 1)) != sources


def _rescalable(job, root, cid, man, nranks):
    """A checkpoint of `man["ranks"]` ranks resumed at `nranks`: only where the strategy's workers
    can take their state out of the old workers' files (its registry entry's `rescale`); else one
    line."""
    from .. import strategies
    was = man.get("ranks")
    head = f"{ckpt_path(root, cid)}: checkpoint holds {was} ranks, this run has {nranks}"
    if not strategies.get(job.strategy.name).rescale:
        can = [n for n in strategies.names() if strategies.get(n).rescale and not strategies.get(n).testing]
        raise ConfigError(f"{head}; {job.strategy.name!r} resumes only at its checkpoint's rank count (its state "
                          f"is not dealt again at a restore; {', '.join(can)} resume at another); resume with "
                          f"mpiexec -n {was}")


def _same_input(job, recorded, current):
    """The staged input must be the one the checkpointed run read (names, sizes, SHA-256); a
    staged log may have grown since (batches are only ever appended)."""
    from .staged import is_log, read_manifest
    grows = is_log(read_manifest(job.staged))
    for s in job.streams:
        want, have = recorded.get(s.name, {}), current.get(s.name, {})
        d = os.path.join(job.staged, s.name)
        for n in sorted(set(want) | set(have)):
            if n not in have:
                raise InputError(f"{os.path.join(d, n)}: the staged part file the checkpointed run read is gone; "
                                 f"the input changed since the checkpoint, so it cannot be resumed exactly once")
            if n not in want and grows:
                continue
            if n not in want:
                raise InputError(f"{os.path.join(d, n)}: staged part file was not there when the checkpointed run "
                                 f"read its input; the input changed, so it cannot be resumed exactly once")
            if want[n].get("sha256") != have[n]["sha256"] or want[n].get("bytes") != have[n]["bytes"]:
                raise InputError(f"{os.path.join(d, n)}: staged part file changed since the checkpoint (SHA-256 "
                                 f"differs); the input changed, so the run cannot be resumed exactly once")


def prune(root, keep):
    """Keep the newest `keep` complete checkpoints; drop older ones and stale incomplete ones."""
    cps = list_checkpoints(root)
    complete = [c for c, m in cps if m is not None]
    keep_ids = set(complete[-keep:])
    newest = complete[-1] if complete else -1
    for c, m in cps:
        if c not in keep_ids and (m is not None or c < newest):
            shutil.rmtree(ckpt_path(root, c), ignore_errors=True)


def describe(root):
    """Rows for `mpi-join checkpoint inspect`."""
    import h5py
    rows = []
    for cid, man in list_checkpoints(root):
        files = sorted(glob.glob(os.path.join(ckpt_path(root, cid), "rank-*.h5")))
        tuples, size = 0, 0
        for f in files:
            size += os.path.getsize(f)
            try:
                with h5py.File(f, "r") as h:
                    tuples += sum(rows or 0 for _, _, rows in entries(h))
            except Exception:  # noqa: BLE001 - inspect reports damage instead of failing
                tuples = None
                break
        rows.append({
            "id": cid, "complete": man is not None, "rank_files": len(files),
            "epoch": man.get("epoch") if man else None,
            "input_offset": man.get("input_offset") if man else None,
            "result_files": _result_files(man) if man else None,
            "results": man.get("results") if man else None,
            "state_rows": tuples, "bytes": size,
            "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(man["created"])) if man else None,
        })
    return rows
