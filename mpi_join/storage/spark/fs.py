"""Files through Hadoop's FileSystem API, so local paths, file:// and hdfs:// all work alike."""
import os


def _jvm_path(spark, path):
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(uri(path))
    fs = p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return jvm, fs, p


def qualify(uri):
    """Local paths become absolute (Spark resolves relative paths against its own cwd)."""
    return uri if "://" in uri else os.path.abspath(uri)


def uri(path):
    """What Spark and Hadoop are given for `path`: a local path as a file: URI, since a bare path
    is resolved against fs.defaultFS, which HADOOP_CONF_DIR makes HDFS (a job's own paths are
    local: the ranks read them)."""
    path = str(path)
    return path if "://" in path or path.startswith("file:") else "file://" + os.path.abspath(path)


def list_files(spark, uri, subdirs=None):
    """Data files under a file, directory or glob, sorted by name (hidden and _ files skipped).
    Files in a directory's subdirectories are not read: `subdirs`, a list, is given their URIs."""
    jvm, fs, p = _jvm_path(spark, qualify(uri))
    statuses = fs.globStatus(p) or []
    out = []
    for st in statuses:
        if st.isDirectory():
            for child in fs.listStatus(st.getPath()):
                if child.isFile():
                    out.append(child.getPath())
                elif subdirs is not None and not str(child.getPath().getName()).startswith(("_", ".")):
                    subdirs.append(str(child.getPath().toString()))
        else:
            out.append(st.getPath())
    names = [str(x.toString()) for x in out if not str(x.getName()).startswith(("_", "."))]
    return sorted(names)


def file_stats(spark, uris):
    """[(uri, bytes, modification time in ms)] of files: what a staged input was made from."""
    out = []
    for u in uris:
        jvm, fs, p = _jvm_path(spark, u)
        st = fs.getFileStatus(p)
        out.append([u, int(st.getLen()), int(st.getModificationTime())])
    return out


def overlap(a, b):
    """Is one of two qualified paths the other or inside it (an output over its own input)?"""
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def exists(spark, uri):
    jvm, fs, p = _jvm_path(spark, qualify(uri))
    return bool(fs.exists(p))


def write_text(spark, uri, text):
    """Write a small text file atomically (write to a temporary name, then rename)."""
    jvm, fs, p = _jvm_path(spark, qualify(uri))
    tmp = jvm.org.apache.hadoop.fs.Path(str(p.toString()) + ".tmp")
    out = fs.create(tmp, True)
    out.write(bytearray(text.encode()))
    out.close()
    if fs.exists(p):
        fs.delete(p, False)
    fs.rename(tmp, p)


def read_text(spark, uri):
    jvm, fs, p = _jvm_path(spark, qualify(uri))
    if not fs.exists(p):
        return None
    stream = fs.open(p)
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
    lines = []
    line = reader.readLine()
    while line is not None:
        lines.append(line)
        line = reader.readLine()
    reader.close()
    return "\n".join(lines)


_COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".xz")


def first_line(spark, uri):
    """The first line of an uncompressed text file without running a Spark job (a CSV header),
    or None for a compressed file (the caller lets Spark read it)."""
    if uri.lower().endswith(_COMPRESSED):
        return None
    jvm, fs, p = _jvm_path(spark, uri)     # as list_files names it (file:/..., hdfs://...)
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(p), "UTF-8"))
    try:
        line = reader.readLine()
    finally:
        reader.close()
    return "" if line is None else str(line).lstrip("\ufeff")


def delete(spark, uri):
    jvm, fs, p = _jvm_path(spark, qualify(uri))
    if fs.exists(p):
        fs.delete(p, True)
