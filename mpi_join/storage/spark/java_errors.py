"""One line for an error that Spark or Hadoop raised in the JVM (HDFS in safe mode, a path the
user may not write, no DataNode to take a block, a file gone between listing and reading, an
unreachable NameNode) instead of a Python traceback around a Java one."""
import re

# (what the deepest cause's class or message holds, what it means for the user)
_HINTS = (
    ("SafeModeException", "the NameNode is in safe mode: wait until it leaves it (hdfs dfsadmin -safemode get), "
                          "then run again"),
    ("AccessControlException", "permission denied on HDFS: write where your user may (hdfs dfs -ls shows owners), "
                               "or have the path's owner grant it"),
    ("minReplication", "no DataNode took the data (is every DataNode running? hdfs dfsadmin -report); nothing was "
                       "marked complete: run again once they are"),
    ("FileNotFoundException", "a file is gone (removed after it was listed?): run again"),
    ("ConnectException", "cannot reach the service: is it running, and is the address in the URI right?"),
)


def _java(e):
    """The Java exception behind a Python one raised by py4j or PySpark, or None."""
    for attr in ("java_exception", "_origin"):
        j = getattr(e, attr, None)
        if j is not None:
            return j
    return None


def java_error_line(e):
    """One line for `e` when it carries a Java exception, else None."""
    j = _java(e)
    if j is None:
        return None
    try:
        chain = [j]
        while chain[-1].getCause() is not None and len(chain) < 20:
            chain.append(chain[-1].getCause())
        texts = [str(c.toString()) for c in chain]
    except Exception:          # the JVM is gone: what the Python exception says
        texts = [str(e)]
    root = texts[-1].splitlines()[0] if texts[-1] else texts[0]
    # a RemoteException names the server side's class in parentheses: keep that one
    root = re.sub(r"^org\.apache\.hadoop\.ipc\.RemoteException\(([\w.$]+)\): ", r"\1: ", root)
    short = re.sub(r"^(?:[a-z]\w*\.)+([A-Z][\w$]*)", r"\1", root)[:400]
    whole = " ".join(texts)
    hint = next((h for k, h in _HINTS if k in whole), None)
    return f"{short}{'; ' + hint if hint else ''}"
