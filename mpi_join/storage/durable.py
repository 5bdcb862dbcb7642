"""Files that a reader sees whole or not at all: written beside, flushed to disk, renamed."""
import json
import os


def write_json(path, obj, tmp=None):
    """Write `obj` as JSON to `path` atomically and durably (the temporary `tmp` defaults to
    path + ".tmp"; a hidden name keeps it from readers that list a folder)."""
    tmp = tmp or path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
