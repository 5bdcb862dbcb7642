"""HDF5 checkpoints: consistent cuts of every rank's state, for exactly-once restart.

A checkpoint is a directory ckpt-<id>/ with one HDF5 file per rank (its window and strategy
state: named arrays plus JSON attributes) and MANIFEST.json, written last and atomically by the
master once every rank has written its file. The manifest records the input offset (tuples
released before the cut), the result files committed up to the cut, the number of ranks and a
fingerprint of the job configuration. A checkpoint without a manifest is incomplete and ignored.

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

from .errors import ConfigError, InputError

FORMAT = "mpi-join-checkpoint/1"
MANIFEST = "MANIFEST.json"


def fingerprint(job):
    """What a checkpoint's state depends on: streams, windows, predicate, strategy parameters
    (testing knobs such as fault injection excepted: a resumed run may drop them)."""
    from . import strategies
    params = strategies.get(job.strategy.name).params
    desc = {
        "ts_unit": job.ts_unit,
        "streams": [[s.name, s.schema, s.window.kind, s.window.size] for s in job.streams],
        "predicate": repr(job.predicate),
        "strategy": [job.strategy.name, {k: v for k, v in sorted(job.strategy.params.items()) if not (k in params and params[k].testing)}],
    }
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ckpt_path(root, cid):
    return os.path.join(root, f"ckpt-{cid:06d}")


def rank_file(root, cid, rank):
    return os.path.join(ckpt_path(root, cid), f"rank-{rank:04d}.h5")


def write_rank(root, cid, rank, arrays, attrs):
    """Write one rank's state: `arrays` {name: ndarray} and JSON-able `attrs`. Atomic rename."""
    import h5py
    path = rank_file(root, cid, rank)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = FORMAT
        f.attrs["rank"] = rank
        f.attrs["checkpoint"] = cid
        f.attrs["state"] = json.dumps(attrs)
        g = f.create_group("arrays")
        for name, a in arrays.items():
            g.create_dataset(name, data=np.ascontiguousarray(a))
    os.replace(tmp, path)
    return path


def read_rank(root, cid, rank, expected=None):
    """Read one rank's state, validating it. `expected(name)` gives the dtype the array `name`
    must have (None: the array should not be there). Returns (arrays, attrs)."""
    import h5py
    path = rank_file(root, cid, rank)
    if not os.path.exists(path):
        raise InputError(f"{path}: checkpoint file of rank {rank} is missing")
    arrays = {}
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT or int(f.attrs.get("rank", -1)) != rank:
                raise InputError(f"{path}: not a checkpoint file of rank {rank} ({FORMAT})")
            attrs = json.loads(f.attrs["state"])

            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    arrays[name] = obj[()]
            f["arrays"].visititems(visit)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - h5py raises OSError/KeyError/ValueError on damage
        raise InputError(f"{path}: damaged checkpoint file: {e}") from None
    for name, a in arrays.items():
        if expected is None:
            continue
        want = expected(name)
        if want is None:
            raise InputError(f"{path}: unexpected array '{name}' in checkpoint")
        if a.dtype != want or a.ndim != 1:
            raise InputError(f"{path}: array '{name}' has dtype {a.dtype} and shape {a.shape}; "
                             f"this job needs a 1-d array of {want}")
    return arrays, attrs


def write_manifest(root, cid, info):
    """Mark checkpoint `cid` complete (written last, atomically)."""
    man = dict(info, format=FORMAT, checkpoint=cid, created=time.time())
    path = os.path.join(ckpt_path(root, cid), MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(man, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return man


def list_checkpoints(root):
    """[(id, manifest or None if incomplete)] sorted by id."""
    out = []
    for d in sorted(glob.glob(os.path.join(root, "ckpt-*"))):
        try:
            cid = int(os.path.basename(d)[5:])
        except ValueError:
            continue
        man = None
        mp = os.path.join(d, MANIFEST)
        if os.path.exists(mp):
            try:
                with open(mp) as f:
                    man = json.load(f)
            except (OSError, ValueError):
                man = None
        out.append((cid, man))
    return out


def latest_complete(root, job, nranks):
    """The newest complete checkpoint usable by this job on `nranks` ranks, or a clear error."""
    if not os.path.isdir(root):
        raise InputError(f"{root}: checkpoint directory not found")
    done = [(c, m) for c, m in list_checkpoints(root) if m is not None]
    if not done:
        raise InputError(f"{root}: no complete checkpoint (no ckpt-*/{MANIFEST})")
    cid, man = done[-1]
    fp = fingerprint(job)
    if man.get("fingerprint") != fp:
        raise ConfigError(f"{ckpt_path(root, cid)}: checkpoint was written by a different job configuration "
                          f"(fingerprint {man.get('fingerprint')}, this job {fp}); resume with the job it came from")
    if man.get("ranks") != nranks:
        raise ConfigError(f"{ckpt_path(root, cid)}: checkpoint holds {man.get('ranks')} ranks; "
                          f"resume with mpiexec -n {man.get('ranks')} (got {nranks})")
    for r in range(nranks):
        read_rank(root, cid, r)        # every file present and readable before anyone starts
    return cid, man


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
                    n = [0]

                    def visit(name, obj):
                        if isinstance(obj, h5py.Dataset) and obj.shape:
                            n[0] += obj.shape[0]
                    h["arrays"].visititems(visit)
                    tuples += n[0]
            except Exception:  # noqa: BLE001 - inspect reports damage instead of failing
                tuples = None
                break
        rows.append({
            "id": cid, "complete": man is not None, "rank_files": len(files),
            "epoch": man.get("epoch") if man else None,
            "input_offset": man.get("input_offset") if man else None,
            "result_files": len(man.get("committed_files", [])) if man else None,
            "results": man.get("results") if man else None,
            "state_rows": tuples, "bytes": size,
            "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(man["created"])) if man else None,
        })
    return rows
