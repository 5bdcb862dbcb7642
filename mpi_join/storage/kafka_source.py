"""A stream's records from a Kafka topic, for live staging (`stage --follow`, `live`): read in the
stager's process with confluent-kafka (librdkafka), since Maven Central serves no Spark Kafka
connector for this PySpark (README, "Real HDFS, YARN and Kafka on this machine").

    raw = { source = "kafka", format = "json", time = "t", time_unit = "ms",
            options = { "kafka.bootstrap.servers" = "broker:9092", subscribe = "trades" } }

Each record's value is a CSV line (the event time, then the schema's columns, in that order,
as a socket source's) or a JSON object naming them. The consumer is assigned every partition of
the topic (new partitions join within seconds, read from their first offset) and commits
nothing to Kafka: the staged log records, in the same commit as a batch's rows, the next offset
of each partition it covers (log["kafka_offsets"]), and a restarted stager seeks there, so each
record is staged or quarantined exactly once whatever the consumer group says. The watermark is
held per partition, as Flink's Kafka source holds it: a partition with records still unread (or
an open transaction's) holds its stream's watermark at the largest event time it has given
(log["kafka_max_seen"]), so a partition read behind the others costs waiting, not late rows.
Records of a transactional producer are read committed; the consumer's position passes the
transactions' markers, so `--until end` and a drain end. A record's source
is `kafka://TOPIC/PARTITION` and its record number its offset: a quarantined record is named by
topic, partition and offset."""
import io
import json
import time

import numpy as np
import pyarrow as pa

from ..errors import InputError, JobError
from ..schema import TS

CONNECT_S = 15
_FIELDS = "a row with more or fewer fields than the header"


def is_kafka(s):
    return s.raw is not None and s.raw.source == "kafka"


def options(s):
    """(bootstrap servers, topic, starting offsets) from the stream's options, in Spark's names
    or Kafka's own."""
    o = dict(s.raw.options)
    servers = o.get("kafka.bootstrap.servers") or o.get("bootstrap.servers")
    topic = o.get("subscribe") or o.get("topic")
    where = f"streams.{s.name}.raw.options"
    if not servers:
        raise JobError(f"{where}: \"kafka.bootstrap.servers\" is required (HOST:PORT[,HOST:PORT...])")
    if not topic or "," in topic:
        raise JobError(f"{where}: subscribe: one topic is required, got {topic!r}")
    start = o.get("startingOffsets", "earliest")
    if start not in ("earliest", "latest"):
        raise JobError(f"{where}: startingOffsets: earliest or latest, got {start!r}")
    return servers, topic, start


def check(job):
    """Refuse, in one line and before a log is started, a Kafka stream whose broker cannot be
    reached or whose topic does not exist."""
    from confluent_kafka.admin import AdminClient
    for s in job.streams:
        if is_kafka(s):
            servers, topic, _ = options(s)
            _topic(AdminClient({"bootstrap.servers": servers, "log_level": 0}), s, servers, topic, CONNECT_S)


def _topic(client, s, servers, topic, timeout, reachable=True):
    """The metadata of `topic` through `client` (a consumer or an admin client); an unreachable
    broker is one line (or, unless `reachable`, None: tried again later), and so is a topic that
    is not there. An admin client lists every topic (asking it for one by name may create it on
    the broker); a consumer asks for the one (a consumer never creates a topic: librdkafka's
    allow.auto.create.topics is false), so a broker of many topics costs no more."""
    from confluent_kafka import Consumer, KafkaException
    try:
        md = client.list_topics(topic, timeout=timeout) if isinstance(client, Consumer) else \
            client.list_topics(timeout=timeout)
    except KafkaException as e:
        if not reachable:
            return None
        raise JobError(f"streams.{s.name}: cannot reach Kafka at {servers} within {timeout} s "
                       f"({e.args[0].str() if e.args else e})") from None
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        why = t.error.str() if t is not None and t.error is not None else "not found"
        raise InputError(f"streams.{s.name}: Kafka topic {topic!r} at {servers}: {why}")
    return t


def source_uri(topic, partition):
    return f"kafka://{topic}/{partition}"


class KafkaInputs:
    """The Kafka streams of a job: poll them, parse their records, and say how far each has been
    read. `log`: the staged log's record (its kafka_offsets, where a restart goes on, and
    kafka_max_seen, each partition's largest event time: the holds go on from them)."""

    def __init__(self, job, log, say):
        from confluent_kafka import Consumer
        self.job, self.say = job, say
        self.next = dict(log.get("kafka_offsets") or {})
        self.tops = dict(log.get("kafka_max_seen") or {})    # {source uri: largest event time given}
        self.fresh = not log.get("batches")          # the log's first start: `latest` applies
        self.streams = [(i, s, *options(s)) for i, s in enumerate(job.streams) if is_kafka(s)]
        self.consumers, self.parts, self.refreshed, self.down = {}, {}, 0.0, None
        for i, s, servers, topic, _ in self.streams:
            self.consumers[i] = Consumer({"bootstrap.servers": servers, "group.id": f"mpi-join-{job.name}-{s.name}",
                                         "enable.auto.commit": False, "enable.partition.eof": False,
                                         "auto.offset.reset": "earliest", "log_level": 0,
                                         "isolation.level": "read_committed", "allow.auto.create.topics": False,
                                         "fetch.min.bytes": 256 << 10, "fetch.wait.max.ms": 25,
                                         "error_cb": self._error})
            self.parts[i] = set()
        self.refresh(first=True)

    def _error(self, err):
        from confluent_kafka import KafkaError
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT) and self.down is None:
            self.down = time.monotonic()
            self.say(f"stage --follow: lost the Kafka broker ({err.str()}); retrying")

    def refresh(self, first=False):
        """Assign every partition of each topic (new ones from their first offset, or with
        `latest` at the log's first start from the end then, as an offset); a topic gone is
        fatal, in one line."""
        from confluent_kafka import TopicPartition, OFFSET_BEGINNING
        for i, s, servers, topic, start in self.streams:
            c = self.consumers[i]
            t = _topic(c, s, servers, topic, CONNECT_S if first else 5, reachable=first)
            if t is None:
                return                         # the broker is away: the next refresh tries again
            new = sorted(set(t.partitions) - self.parts[i])
            if new:
                tps = []
                for p in new:
                    u = source_uri(topic, p)
                    if u not in self.next and start == "latest" and first and self.fresh:   # the end now
                        self.next[u] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=CONNECT_S)[1]
                    tps.append(TopicPartition(topic, p, self.next.get(u, OFFSET_BEGINNING)))
                c.incremental_assign(tps)
                self.parts[i].update(new)
                if not first:
                    self.say(f"stage --follow: stream {s.name}: Kafka topic {topic!r} has new partition(s) "
                             f"{', '.join(map(str, new))}: reading them from their first offset")
        self.refreshed = time.monotonic()

    def ends(self):
        """{source uri: the offset after the last record} of every partition now (what `--until
        end` stages up to)."""
        from confluent_kafka import TopicPartition
        out = {}
        for i, s, servers, topic, _ in self.streams:
            for p in sorted(self.parts[i]):
                lo, hi = self.consumers[i].get_watermark_offsets(TopicPartition(topic, p), timeout=CONNECT_S)
                out[source_uri(topic, p)] = hi
        return out

    def _positions(self, i, topic):
        """{partition: (the next offset to read, the offset after its last record or -1 when not
        known yet)} of stream i's partitions, from the consumer's own counts (no request)."""
        from confluent_kafka import TopicPartition
        parts = sorted(self.parts[i])
        pos = {tp.partition: tp.offset for tp in self.consumers[i].position([TopicPartition(topic, p) for p in parts])}
        out = {}
        for p in parts:
            lo, hi = self.consumers[i].get_watermark_offsets(TopicPartition(topic, p), cached=True)
            out[p] = (max(pos.get(p, -1), self.next.get(source_uri(topic, p), -1), lo), hi)
        return out

    def hold(self):
        """Per job stream: None (every partition read to its end), or the smallest largest event
        time among the partitions with records still to read, or NOTHING when one of those has
        given no row yet. Partition by partition the watermark waits for what is still there."""
        from .staged_log import NOTHING
        out = [None] * len(self.job.streams)
        for i, s, servers, topic, _ in self.streams:
            for p, (at, hi) in self._positions(i, topic).items():
                if 0 <= hi <= at:
                    continue                    # read to its end (or empty)
                top = self.tops.get(source_uri(topic, p))
                if top is None:
                    out[i] = NOTHING
                    break
                out[i] = top if out[i] is None else min(out[i], top)
        return out

    def behind(self, ends):
        """Whether a partition is still short of its offset in `ends` (the consumer's position
        passes a transaction's commit marker, which no record of ours holds)."""
        for i, s, servers, topic, _ in self.streams:
            for p, (at, _) in self._positions(i, topic).items():
                if at < ends.get(source_uri(topic, p), 0):
                    return True
        return False

    def state(self, hold):
        """What a commit keeps of these topics: where each partition goes on and the largest
        event time each has given; and the watermark's holds now (`hold()`)."""
        return {"offsets": dict(self.next), "max_seen": dict(self.tops), "hold": hold}

    def read(self, max_records=50_000, timeout=0.05, stop=None):
        """Poll every stream once: (per stream waiting rows, their sources, per stream bad rows or
        None, {source uri: next offset} covered). `stop`: {source uri: offset} not to read from
        (`--until end`: what was there at the start)."""
        from .staged_log import waiting_dtype
        if time.monotonic() - self.refreshed > 2.0:
            self.refresh()
        arrivals = [np.zeros(0, waiting_dtype(s)) for s in self.job.streams]
        bad, paths, covered = [None] * len(self.job.streams), [], {}
        for i, s, servers, topic, _ in self.streams:
            msgs = self.consumers[i].consume(max_records, timeout)
            if msgs and self.down is not None:
                self.say(f"stage --follow: the Kafka broker is back after {time.monotonic() - self.down:.1f} s")
                self.down = None
            msgs = [m for m in msgs if m.error() is None]   # a transport error: reported by error_cb, retried
            # a column at a time (a loop over the records with a dict per partition was half the
            # stager's time at 60,000 records/s per topic)
            part = np.fromiter((m.partition() for m in msgs), np.int64, len(msgs))
            offs = np.fromiter((m.offset() for m in msgs), np.int64, len(msgs))
            values = [m.value() or b"" for m in msgs]
            rows, refused = [], []
            for p in np.unique(part).tolist():
                u = source_uri(topic, p)
                at = np.flatnonzero((part == p) & (offs < (stop.get(u, 0) if stop is not None else 2 ** 62)))
                if not len(at):
                    continue
                r, b = parse_records(s, [values[k] for k in at.tolist()], offs[at], u, self.job.ts_unit)
                r["_src"] = len(paths)
                paths.append(u)
                rows.append(r)
                if b is not None:
                    refused.append(b)
                covered[u] = int(offs[at[-1]]) + 1
                if len(r):
                    top = int(r[TS].max())
                    self.tops[u] = max(self.tops.get(u, top), top)
            if rows:
                arrivals[i] = np.concatenate(rows)
            if refused:
                bad[i] = pa.concat_tables(refused, promote_options="permissive")
        self.next.update(covered)
        return arrivals, paths, (bad if any(b is not None for b in bad) else None), covered

    def close(self):
        for c in self.consumers.values():
            c.close()


def _json_text(v):
    """A JSON value as the text Spark's from_json gives a string field: numbers as written."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))


def _table(s, values):
    """Records' values as the declared columns' text: (table, which records had no such row)."""
    from .spark.stage import _declared
    from .fast_csv import read_text
    want = _declared(s)
    if s.raw.format == "json":
        cols, broken = {c: [] for c in want}, np.zeros(len(values), bool)
        for k, v in enumerate(values):
            try:
                obj = json.loads(v, parse_int=str, parse_float=str, parse_constant=str)
            except (ValueError, UnicodeDecodeError):
                obj = None
            if not isinstance(obj, dict):
                broken[k], obj = True, {}
            for c in want:
                cols[c].append(_json_text(obj.get(c)))
        return pa.table({c: pa.array(v, pa.string()) for c, v in cols.items()}), broken
    text = b"\n".join(values) + b"\n"
    if text.count(b"\n") != len(values) or b"\r" in text:     # a record with its own line end(s)
        text = b"\n".join(v.rstrip(b"\r\n") for v in values) + b"\n"
    try:                              # one CSV line per record, as many rows as records
        t = read_text(s, io.BytesIO(text), want)
        if t.num_rows == len(values):
            return t, np.zeros(len(values), bool)
    except pa.ArrowInvalid:
        pass
    rows, broken = [], np.zeros(len(values), bool)
    for k, v in enumerate(values):
        try:
            t = read_text(s, io.BytesIO(v.rstrip(b"\r\n") + b"\n"), want)
            ok = t.num_rows == 1
        except pa.ArrowInvalid:
            ok = False
        broken[k] = not ok
        rows.append(t if ok else pa.table({c: pa.array([None], pa.string()) for c in want}))
    return pa.concat_tables(rows), broken


def parse_records(s, values, offsets, uri, job_unit):
    """Records of one partition as (waiting rows, their _rec the offsets; quarantined rows or None)."""
    t, broken = _table(s, values)
    if broken.any():                  # the records with no row: quarantined; the rest parsed together
        keep = np.flatnonzero(~broken)
        rows, refused = _together(s, t.take(pa.array(keep)), offsets[keep], uri, job_unit)
        gone = [_record(s, uri, offsets[k], _FIELDS if s.raw.format == "csv" else "not a JSON object", values[k])
                for k in np.flatnonzero(broken)]
        return rows, pa.concat_tables(([refused] if refused is not None else []) + gone, promote_options="permissive")
    return _together(s, t, offsets, uri, job_unit)


def _together(s, t, offsets, uri, job_unit):
    from .fast_csv import parse
    from .spark.stage import _declared
    from .staged_log import waiting_dtype
    got = parse(t, s, _declared(s), waiting_dtype(s), job_unit, uri) if t.num_rows else None
    if got is None:                   # record by record: what one cannot be read as is quarantined alone
        return _one_by_one(s, t, offsets, uri, job_unit)
    rows, refused, _ = got
    rows["_rec"] = offsets[rows["_rec"] - 1]
    return rows, _offsets(refused, offsets)


def _record(s, uri, offset, why, value):
    """One quarantined record that has no row: its value's text in the event-time column."""
    from .spark.stage import _declared
    want = _declared(s)
    text = value.decode("utf-8", "replace")[:1000]
    return pa.table({"file": [uri], "record": pa.array([offset], pa.int64()), "reason": [why],
                     **{c: pa.array([text if c == want[0] else None], pa.string()) for c in want}})


def _offsets(refused, offsets):
    if refused is None:
        return None
    rec = offsets[refused.column("record").to_numpy() - 1]
    return refused.set_column(refused.schema.get_field_index("record"), "record", pa.array(rec, pa.int64()))


def _one_by_one(s, t, offsets, uri, job_unit):
    from .fast_csv import parse
    from .spark.stage import _declared
    from .staged_log import waiting_dtype
    want, dtype = _declared(s), waiting_dtype(s)
    rows, bad = [], []
    for k in range(t.num_rows):
        one = t.slice(k, 1)
        got = parse(one, s, want, dtype, job_unit, uri)
        if got is None:
            bad.append(pa.table({"file": [uri], "record": pa.array([offsets[k]], pa.int64()),
                                 "reason": ["a value this reader does not parse"],
                                 **{c: pa.array([one.column(c)[0].as_py()], pa.string()) for c in want}}))
            continue
        r, refused, _ = got
        r["_rec"] = offsets[k]
        rows.append(r)
        if refused is not None:
            bad.append(_offsets(refused, offsets[k:k + 1]))
    out = np.concatenate(rows) if rows else np.zeros(0, dtype)
    return out, (pa.concat_tables(bad, promote_options="permissive") if bad else None)
