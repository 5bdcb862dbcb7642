"""Job files: windows, durations, predicates and strategy parameters are read and checked."""
import tomllib

import pytest

from mpi_join.config import parse_job
from mpi_join.errors import ConfigError
from mpi_join.units import parse_duration_ns
from conftest import cli, equi_job_text


def _job(text):
    return parse_job(tomllib.loads(text), "job.toml")


@pytest.mark.parametrize("text,ns", [("15min", 900 * 10**9), ("2s", 2 * 10**9), ("250ms", 250 * 10**6),
                                     ("1.5h", 5400 * 10**9), ("7us", 7000), (" 3 sec ", 3 * 10**9)])
def test_durations(text, ns):
    assert parse_duration_ns(text, "f") == ns


@pytest.mark.parametrize("bad", ["15 minutes", "fast", "", "10", 10])
def test_bad_durations_name_the_field(bad):
    with pytest.raises(ConfigError, match="^my.field: "):
        parse_duration_ns(bad, "my.field")


def test_window_kinds_in_ts_units():
    job = _job(equi_job_text(('"15min"', "1000")))
    r, s = job.streams
    assert (r.window.kind, r.window.size) == ("time", 900_000)        # ts_unit ms
    assert (s.window.kind, s.window.size) == ("count", 1000)
    job = _job(equi_job_text(('"unbounded"', '"1us"')))
    assert job.streams[0].window.kind == "unbounded"
    assert job.streams[1].window.size == 1                             # rounded up, never to zero


def test_strategy_defaults_filled_and_checked():
    job = _job(equi_job_text(('"1s"', '"1s"')))
    assert job.strategy.params["partitions"] == 60 and job.strategy.params["local_join"] == "index"
    with pytest.raises(ConfigError, match="strategy.local_join: expected one of"):
        _job(equi_job_text(('"1s"', '"1s"'), extra_strategy='local_join = "sort"'))
    with pytest.raises(ConfigError, match="strategy.fanout: unknown parameter"):
        _job(equi_job_text(('"1s"', '"1s"'), extra_strategy="fanout = 3"))


@pytest.mark.parametrize("pred,msg", [
    ('equi = [["R.v", "S.w"]]', "equi keys must be integer"),
    ('equi = [["R.k", "R.k2"]]', "both sides are in stream 'R'"),
    ('equi = [["X.k", "S.k"]]', "unknown stream 'X'"),
    ('band = [{left = "R.v", right = "S.w"}]', "eps: expected a finite number"),
    ('theta = [{udf = "no_such_module:f"}]', "cannot import module 'no_such_module'"),
    ('theta = [{udf = "mpi_join.udfs:nothing"}]', "has no function 'nothing'"),
    ("", "give at least one of equi, band, theta or asof"),
])
def test_bad_predicates(pred, msg):
    with pytest.raises(ConfigError, match=msg):
        _job(equi_job_text(('"1s"', '"1s"'), predicate=pred))


def test_reserved_and_unknown_types():
    with pytest.raises(ConfigError, match="streams.R.schema.k: unknown column type 'int128'"):
        _job(equi_job_text(('"1s"', '"1s"')).replace('k = "int32"', 'k = "int128"'))
    with pytest.raises(ConfigError, match="'seq' is reserved"):
        _job(equi_job_text(('"1s"', '"1s"')).replace('k = "int32"', 'k = "int32", seq = "int64"'))


def test_run_help_documents_every_option():
    p = cli("run", "--help")
    assert p.returncode == 0
    for word in ("--np", "--output", "--staged", "--strategy", "window", "batch_size", "flush_interval",
                 "rate", "max_inflight", "liveness_timeout", "equi", "band", "theta", "local_join", "partitions", "ts_unit"):
        assert word in p.stdout, word


def test_uint64_key_against_signed_key_is_refused():
    """2^64-1 stored as uint64 must never meet -1 stored as int64: such a job is refused."""
    text = equi_job_text(('"1s"', '"1s"')).replace('k = "int32"', 'k = "uint64"')
    with pytest.raises(ConfigError, match=r"predicate.equi\[0\]: equi-join of uint64 column R.k with int64 column S.k"):
        _job(text)
    both = text.replace('k = "int64"', 'k = "uint64"')
    assert _job(both).predicate.equi


def test_fast_tier_marker_is_registered(pytestconfig):
    assert any(m.startswith("slow:") for m in pytestconfig.getini("markers"))


def test_liveness_timeout_defaults_to_30s_and_is_checked():
    assert _job(equi_job_text(('"1s"', '"1s"'))).run.liveness_timeout_s == 30.0
    assert _job(equi_job_text(('"1s"', '"1s"'), run='liveness_timeout = "2min"')).run.liveness_timeout_s == 120.0
    assert _job(equi_job_text(('"1s"', '"1s"'), run='liveness_timeout = "off"')).run.liveness_timeout_s == 0
    with pytest.raises(ConfigError, match="run.liveness_timeout: at least 1s"):
        _job(equi_job_text(('"1s"', '"1s"'), run='liveness_timeout = "200ms"'))


def test_udf_modules_next_to_two_jobs_never_mix(tmp_path):
    """Two jobs whose UDF modules have the same name load each its own (bench and verify load
    several jobs in one process)."""
    from mpi_join.config import load_job
    from mpi_join.join.predicate import load_udf
    from conftest import equi_job_text
    got = []
    for k in (1, 2):
        d = tmp_path / f"j{k}"
        d.mkdir()
        (d / "my_udfs.py").write_text(f"def f(a, b):\n    return a[\"k\"] == {k}\n")
        text = equi_job_text(('"5ms"', '"5ms"'), predicate='theta = [{udf = "my_udfs:f", streams = ["R", "S"]}]')
        (d / "job.toml").write_text(text)
        job = load_job(str(d / "job.toml"))
        got.append(load_udf(job.predicate.theta[0].udf))
    import numpy as np
    r = np.zeros(1, [("k", "i4")])
    r["k"] = 2
    assert [bool(f.py_func(r[0], r[0])) for f in got] == [False, True]


@pytest.mark.parametrize("table, msg", [
    ('{ servers = "h:9092", topic = "t", format = "avro" }', "output.kafka.format: json or csv"),
    ('{ topic = "t" }', "output.kafka.servers: required"),
    ('{ servers = "h:9092", topic = "a b" }', "output.kafka.topic: required, a topic name"),
    ('{ servers = "h:9092", topic = "t", acks = 1 }', "output.kafka.acks"),
])
def test_kafka_output_is_checked(table, msg):
    text = equi_job_text(('"1s"', '"1s"')).replace('dir = "out"', f'dir = "out"\nkafka = {table}')
    with pytest.raises(ConfigError, match=msg.replace(".", r"\.")):
        _job(text)
    ok = _job(equi_job_text(('"1s"', '"1s"')).replace('dir = "out"', 'dir = "out"\nkafka = { servers = "h:9092", topic = "j.1" }'))
    assert (ok.kafka_out.servers, ok.kafka_out.topic, ok.kafka_out.format) == ("h:9092", "j.1", "json")
