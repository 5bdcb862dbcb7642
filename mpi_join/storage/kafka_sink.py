"""A run's committed results produced to a Kafka topic, exactly once (`mpi-join publish`,
`[output] kafka = { servers, topic, format }`). The Parquet results stay the source of truth;
the topic is their copy.

The publisher follows the run's results log as `mpi-join tail` does (tail.py: each committed
part file once, checked against its record) and produces each commit's results, with the
payload columns `collect --with-payload` gives, in one Kafka transaction. The same transaction
records how many commits are published, as the committed offset of a consumer group of the
publisher's own (`mpi-join-publish-<id>`) on partition 0 of the topic: Kafka makes the records
and that mark visible together or not at all, so a restarted publisher (after a SIGKILL, a
`live` restart) starts from the mark and produces no commit twice. Its transactional id is the
same one across restarts (named for the job and its output directory), so the broker fences a
publisher that was thought dead. A `read_committed` consumer sees each result once."""
import hashlib
import json
import os
import time

import numpy as np

from ..errors import JobError

TIMEOUT_S = 30


def publisher_id(job):
    """The transactional id and group of this job's publisher: the same across restarts."""
    digest = hashlib.sha256(os.path.realpath(job.output).encode()).hexdigest()[:12]
    return f"mpi-join-publish-{job.name}-{digest}"


def _json_texts(col):
    """A column's values as JSON texts (what json.dumps gives each), a column at a time."""
    import math
    kinds = set(map(type, col))
    if kinds == {int}:
        return list(map(str, col))
    if kinds == {float} and all(map(math.isfinite, col)):
        return list(map(repr, col))
    out = []
    for v in col:
        if v is None:
            out.append("null")
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append(repr(v) if math.isfinite(v) else json.dumps(v))
        else:
            out.append(json.dumps(v if isinstance(v, str) else str(v)))
    return out


def _csv_texts(col):
    """A column's values as CSV fields, as csv.writer writes them (None empty; a text with a
    comma, a quote or a line break quoted)."""
    out = []
    for v in col:
        if v is None:
            out.append("")
        elif isinstance(v, str):
            out.append('"' + v.replace('"', '""') + '"' if any(c in v for c in ',"\r\n') else v)
        else:
            out.append(str(v))
    return out


def _lines(names, cols, fmt):
    """Rows of `cols` (one per column of `names`: a list of values, or an Arrow integer array)
    as Kafka values: JSON objects or CSV lines, formatted a column at a time and put together by
    Arrow (json.dumps of each row's dict cost the publisher 60% of its time at 35,000 results/s;
    str() of each integer and `%` of each row, most of what was left at 60,000)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if not cols or not len(cols[0]):
        return []
    null, texts = ("null", _json_texts) if fmt == "json" else ("", _csv_texts)
    parts = []
    for i, (n, c) in enumerate(zip(names, cols)):
        if fmt == "json":
            parts.append(("{" if i == 0 else ",") + json.dumps(n) + ":")
        elif i:
            parts.append(",")
        if isinstance(c, (pa.Array, pa.ChunkedArray)):
            parts.append(pc.fill_null(pc.cast(c, pa.string()), null))
        else:
            parts.append(pa.array(texts(c), pa.string()))
    if fmt == "json":
        parts.append("}")
    return pc.cast(pc.binary_join_element_wise(*parts, ""), pa.binary()).to_pylist()


def _records(job, paths, payloads, fmt):
    """The result rows of part files `paths` as Kafka values: seqs, emit_ns, latency_ns, payload."""
    import pyarrow.parquet as pq
    from .tail import project
    seq_cols = [f"{s.name}_seq" for s in job.streams]
    names = seq_cols + ["emit_ns", "latency_ns"] + payloads.names()
    out = []
    for p in paths:
        t = pq.read_table(p)
        if not t.num_rows:
            continue
        seqs = np.stack([t.column(c).fill_null(-1).to_numpy() for c in seq_cols], axis=1)
        cols = [t.column(c).combine_chunks() for c in seq_cols + ["emit_ns", "latency_ns"]] + payloads.columns(seqs)
        out += _lines(*project(job, names, cols), fmt)
    return out


def _produce(producer, topic, value):
    """One record into the producer's queue; a full queue (a commit of more results than it
    holds) waits for what is in flight to be sent."""
    while True:
        try:
            producer.produce(topic, value, partition=0)
            return
        except BufferError:
            producer.poll(0.05)


def _commits(out, once=False, stopped=lambda: False, interval=0.2):
    """Yield (commit number from 1, its new result part files) of a run in `out`, each commit
    once, its files checked against their records, until the final commit (`once`: what is
    committed now). A finished run without commits (a replay) is one commit of its parts."""
    from .checksums import read_success, recorded_parts, verify_part
    from .commits import read_commits, read_committed
    n, rdir = 0, os.path.join(out, "results")
    while not stopped():
        rec = read_committed(out, files=False)
        if rec is None and os.path.exists(os.path.join(out, "_SUCCESS")):
            parts = recorded_parts(read_success(os.path.join(out, "_SUCCESS")), os.path.join(out, "_SUCCESS"))
            for f, r in parts.items():
                verify_part(os.path.join(rdir, f), r)
            yield 1, [os.path.join(rdir, f) for f in sorted(parts)]
            return
        if rec is not None:
            for i in range(n, rec["commits"]):
                files = read_commits(out, i, i + 1)[0]["files"]
                for name, r in files.items():
                    verify_part(os.path.join(rdir, name), r)
                yield i + 1, [os.path.join(rdir, name) for name in sorted(files)]
            n = rec["commits"]
            if rec.get("final"):
                return
        if once:
            return
        time.sleep(interval)


def published(consumer, topic):
    """How many commits the topic holds, by the publisher's mark (0 when none)."""
    from confluent_kafka import TopicPartition
    tp = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)[0]
    return max(0, tp.offset)


def publish(job, out=None, once=False, say=print, stopped=lambda: False):
    """Produce the committed results of `job`'s run in `out` to [output] kafka until the run's
    final commit (or, with `once`, what is committed now); returns (commits, results) produced."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from .tail import Payloads
    k = job.kafka_out
    if k is None:
        raise JobError(f"{job.path}: output.kafka: not set (servers, topic, format)")
    out = out or job.output
    ident = publisher_id(job)
    consumer = Consumer({"bootstrap.servers": k.servers, "group.id": ident, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 0})
    producer = Producer({"bootstrap.servers": k.servers, "transactional.id": ident, "linger.ms": 5,
                         "log_level": 0})
    try:
        md = consumer.list_topics(timeout=15)
        if k.topic not in md.topics:
            raise JobError(f"output.kafka.topic: {k.topic!r} does not exist at {k.servers} (create it: one "
                           f"partition holds the results in commit order)")
        producer.init_transactions(TIMEOUT_S)       # fences an earlier publisher of the same id
        done = published(consumer, k.topic)
    except KafkaException as e:
        raise JobError(f"output.kafka: {k.servers}: {e.args[0].str() if e.args else e}") from None
    say(f"publish: {k.topic} at {k.servers}: {done} commit(s) published before; producing the rest "
        f"({'once' if once else 'until the run ends'})")
    payloads, n_commits, n_rows = Payloads(job), 0, 0
    try:
        for index, paths in _commits(out, once=once, stopped=stopped):
            if index <= done:
                continue                    # this commit is on the topic already
            values = _records(job, paths, payloads, k.format)
            producer.begin_transaction()
            for i, v in enumerate(values):
                _produce(producer, k.topic, v)
                if i % 1000 == 999:                 # delivery reports served now and then, not per record
                    producer.poll(0)
            producer.poll(0)
            producer.send_offsets_to_transaction([TopicPartition(k.topic, 0, index)],
                                                 consumer.consumer_group_metadata(), TIMEOUT_S)
            producer.commit_transaction(TIMEOUT_S)
            n_commits, n_rows = n_commits + 1, n_rows + len(values)
            say(f"publish: commit {index}: {len(values):,} result(s) -> {k.topic}")
    except KafkaException as e:
        raise JobError(f"output.kafka: {k.servers}: {e.args[0].str() if e.args else e}; what was not "
                       f"committed to Kafka is produced again by the next publish") from None
    finally:
        consumer.close()
    return n_commits, n_rows
