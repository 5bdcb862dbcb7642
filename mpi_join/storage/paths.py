"""The names and paths mpi-join may read, write and delete, and the locks on its directories
(README "Safety").

- A stream or column name is an identifier, never a path: `check_name`.
- Every local path the tool writes or deletes is resolved (symlinks included) and must lie in
  the root it belongs to: `inside`, `remove_file`.
- The directories of a job (staged input, raw input, output, checkpoints, a collected dataset)
  never equal, contain or lie inside one another, after resolving symlinks: `check_layout`.
- One run at a time per output and checkpoint directory: `DirLock`.
"""
import glob
import json
import os
import re
import socket
import stat
import threading
import unicodedata
import time

from ..errors import ConfigError, JobError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# control (Cc, U+0085 among them), format (Cf) and line or paragraph separator (Zl, Zp) characters:
# every character a shell, a script or a reader may take for the end of a line
_BREAKS = ("Cc", "Cf", "Zl", "Zp")


def check_name(name, where, what="name"):
    """A stream or column name: letters, digits and `_`, not starting with a digit or `_`
    (names starting with `_` are the runtime's), at most 64 characters."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        shown = repr(name) if isinstance(name, str) and len(name) <= 80 else (
            f"{name[:40]!r}... ({len(name)} characters)" if isinstance(name, str) else repr(name))
        raise ConfigError(f"{where}: {what} {shown} is not an identifier (letters, digits and _, not starting "
                          f"with a digit, at most 64 characters)")
    if name.startswith("_"):
        raise ConfigError(f"{where}: {what} {name!r} starts with '_'; such names are reserved for mpi-join's own "
                          f"columns (_tin, _h, _coord, ...)")
    return name


def check_text(value, where, limit=4096):
    """A value printed into a file or a script: no newline, carriage return, other control
    character or Unicode line break (U+0085, U+2028, U+2029), at most `limit` characters."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected text, got {value!r}")
    bad = next((c for c in value if unicodedata.category(c) in _BREAKS), None)
    if bad is not None:
        raise ConfigError(f"{where}: {value[:60]!r} holds a control character or line break (U+{ord(bad):04X}); refused")
    if len(value) > limit:
        raise ConfigError(f"{where}: longer than {limit} characters")
    return value


def local(path):
    """Is `path` on the local (or shared, mounted) filesystem rather than a URI?"""
    return "://" not in str(path) or str(path).startswith("file://")


def real(path):
    """`path` resolved: absolute, symlinks followed (as far as it exists), file:// stripped."""
    p = str(path)
    if p.startswith("file://"):
        p = p[len("file://"):]
    return os.path.realpath(os.path.abspath(p))


def _glob_root(path):
    """The directory part of a glob (raw input may be "raw/R/*.csv")."""
    p = str(path)
    if not glob.has_magic(p):
        return p
    parts = p.split(os.sep)
    keep = []
    for part in parts:
        if glob.has_magic(part):
            break
        keep.append(part)
    return os.sep.join(keep) or os.sep


def contains(outer, inner):
    """Is resolved path `inner` equal to or inside resolved path `outer`?"""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def inside(root, path, what="path"):
    """`path` resolved, checked to lie inside resolved `root` (raises JobError otherwise)."""
    r, p = real(root), real(path)
    if not contains(r, p):
        raise JobError(f"{path}: {what} resolves to {p}, outside {r}; refused")
    return p


def check_layout(dirs):
    """`dirs`: [(label, path)]. Local directories must not equal, contain or lie inside one
    another (symlinks resolved); URIs of one scheme are compared as text. Raises ConfigError
    naming both."""
    seen = []
    for label, path in dirs:
        if not path:
            continue
        p = str(path)
        key = real(_glob_root(p)) if local(p) else p.rstrip("/")
        for olabel, opath, okey in seen:
            if local(p) != local(opath):
                continue
            if key == okey:
                rel = "the same directory" + (f": both resolve to {key}" if local(p) else "")
            elif contains(key, okey):
                rel = "it contains it"
            elif contains(okey, key):
                rel = "it lies inside it"
            else:
                continue
            raise ConfigError(f"{label}: {p} overlaps {olabel} {opath} ({rel}); the job's input, output, "
                              f"checkpoint and collect directories must be separate")
        seen.append((label, p, key))


def job_dirs(job, collect_out=None, stage_out=None):
    """The directories of `job` that must stay apart, labelled by the field or option."""
    dirs = [("input.staged", stage_out or job.staged), ("output.dir", job.output)]
    if job.checkpoint is not None:
        dirs.append(("checkpoint.dir", job.checkpoint.dir))
    if collect_out:
        dirs.append(("--out", collect_out))
    for s in job.streams:
        if s.raw is not None:
            dirs.append((f"streams.{s.name}.raw.path", s.raw.path))
    return dirs


# -- deleting without following links ---------------------------------------------------

def plain_dir(path, what):
    """Refuse a directory we are about to write or delete in when it is a symlink: a rerun would
    otherwise delete files with mpi-join's names wherever the link points."""
    if os.path.islink(path):
        raise JobError(f"{path}: {what} is a symbolic link (to {os.readlink(path)}); mpi-join writes and deletes "
                       f"only in directories of its own; remove the link")
    if os.path.exists(path) and not os.path.isdir(path):
        raise JobError(f"{path}: {what} exists and is not a directory")


def remove_file(root, path):
    """Delete one regular file or symlink (the link, never its target) that lies in `root`."""
    parent = real(os.path.dirname(path))
    if not contains(real(root), parent):
        raise JobError(f"{path}: resolves outside {real(root)}; not deleted")
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        raise JobError(f"{path}: is a directory where mpi-join expects its own file; not deleted")
    os.unlink(path)


# -- one run per directory -------------------------------------------------------------

LOCK = ".mpi-join.lock"


def _proc_start(pid):
    """A running process's start time in clock ticks since boot (tells a reused pid apart), or
    None when there is none; a zombie (killed, not yet reaped) is not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


class DirLock:
    """An exclusive lock on a directory for the life of a run: the file DIR/.mpi-join.lock,
    created with O_EXCL (atomic on local filesystems and NFS v3+), holding the holder's host,
    pid and start time, and touched every `refresh` seconds while held.

    A lock is stale when its holder is on this host and no longer running (or its pid now belongs
    to another process), or when it has not been touched for `stale_after` seconds (a holder on
    another host that died). A stale lock is taken over with one line saying so; a live one
    refuses the second run with one line naming the holder."""

    def __init__(self, directory, what, refresh=10.0, stale_after=120.0, say=None, name=LOCK, subject=None):
        self.dir, self.what = directory, what
        self.subject = subject or directory      # what the lock holds, as errors name it
        self.path = os.path.join(directory, name)
        self.refresh, self.stale_after = refresh, stale_after
        self.say = say or (lambda m: None)
        self._stop = threading.Event()
        self._thread = None
        self.held = False

    def _record(self):
        pid = os.getpid()
        return {"host": socket.gethostname(), "pid": pid, "proc_start": _proc_start(pid),
                "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "started_unix": time.time()}

    def acquire(self):
        """Create the lock, or take over a stale one. A takeover happens under a second file
        created with O_EXCL (DIR/.mpi-join.lock.takeover), and the lock is judged stale again
        under it, so of several runs that all find it stale exactly one wins; the others then
        find a live lock."""
        plain_dir(self.dir, self.what)
        os.makedirs(self.dir, exist_ok=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder, why = self.holder()
                if why is None:
                    h = holder or {}
                    raise JobError(f"{self.what}: {self.subject} is in use by another run (host {h.get('host', '?')}, "
                                   f"pid {h.get('pid', '?')}, started {h.get('started', '?')}; lock "
                                   f"{self.path}); wait for it to end or choose another directory")
                if why != "being written" and self._take_over():
                    return self._hold()
                time.sleep(0.01)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(self._record(), f)
            return self._hold()
        raise JobError(f"{self.what}: cannot lock {self.dir} ({self.path} keeps coming back)")

    def _hold(self):
        self.held = True
        self._thread = threading.Thread(target=self._touch, name="dir-lock", daemon=True)
        self._thread.start()
        return self

    def _take_over(self):
        """True when this process took the stale lock over (and now holds it)."""
        guard = self.path + ".takeover"
        try:
            fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - os.stat(guard).st_mtime > 10:     # left by a contender that died in it
                    os.unlink(guard)
            except OSError:
                pass
            return False
        try:
            os.close(fd)
            holder, why = self.holder()          # again, under the guard: another may have won meanwhile
            if why is not None and why != "being written":
                self.say(f"mpi-join: {self.what}: taking over a stale lock {self.path} ({why})")
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
                try:                             # create ours while still holding the guard
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(fd, "w") as f:
                    json.dump(self._record(), f)
                return True
            return False
        finally:
            os.unlink(guard)

    def holder(self):
        """(record or None, why it is stale or None when it is live). A lock file that cannot be
        a lock (a symbolic link, not a regular file, not a lock record) is refused with one line
        saying what it is; one just created and still empty is "being written"."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return None, "gone"
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise JobError(f"{self.what}: {self.path} is {kind}, not a lock of mpi-join; remove it if no run "
                           f"is using {self.dir}")
        age = time.time() - st.st_mtime
        try:
            with open(self.path, "rb") as f:
                text = f.read(1 << 16)
        except FileNotFoundError:
            return None, "gone"
        except OSError as e:
            raise JobError(f"{self.what}: {self.path} cannot be read ({e.strerror}); remove it if no run is "
                           f"using {self.dir}") from None
        if not text:
            return None, ("being written" if age < 5 else f"empty, untouched for {age:.0f} s")
        try:
            rec = json.loads(text.decode("utf-8"))
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or not isinstance(rec.get("pid"), int) or not isinstance(rec.get("host"), str):
            raise JobError(f"{self.what}: {self.path} is not a lock record of mpi-join ({len(text):,} bytes of "
                           f"something else); remove it if no run is using {self.dir}")
        if rec.get("host") == socket.gethostname():
            pid = rec.get("pid")
            if _proc_start(pid) is None:
                return rec, f"pid {pid} on this host is not running"
            if rec.get("proc_start") is not None and _proc_start(pid) != rec.get("proc_start"):
                return rec, f"pid {pid} on this host is another process now"
            return rec, None
        if age > self.stale_after:
            return rec, f"host {rec.get('host')} has not touched it for {age:.0f} s"
        return rec, None

    def _touch(self):
        while not self._stop.wait(self.refresh):
            try:
                os.utime(self.path)
            except OSError:
                pass

    def release(self):
        if not self.held:
            return
        self._stop.set()
        self.held = False
        try:
            with open(self.path) as f:
                mine = json.load(f).get("pid") == os.getpid()
        except (OSError, ValueError):
            mine = False
        if mine:
            try:
                os.unlink(self.path)
            except OSError:
                pass
