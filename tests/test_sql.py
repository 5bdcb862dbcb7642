"""The join written as one SQL SELECT (join/sql.py, through sqlglot) is the job its TOML form
is: the same predicate and windows after loading; what SQL cannot say is refused with one line
naming the clause; `explain` prints both forms (fast tier)."""
import tomllib

import pytest

from mpi_join.config import parse_job
from mpi_join.errors import ConfigError
from conftest import cli

STREAMS = """
[streams.trades]
schema = {{ sym = "int32", px = "float64" }}
{wt}
raw = {{ path = "raw/trades", format = "csv", time = "time", time_unit = "ms" }}
[streams.quotes]
schema = {{ sym = "int32", bid = "float64" }}
{wq}
raw = {{ path = "raw/quotes", format = "csv", time = "time", time_unit = "ms" }}
"""


def _job(predicate, wt='window = "5s"', wq='window = "5s"', strategy="hash", unit="ms"):
    text = (f'[job]\nname = "tq"\nts_unit = "{unit}"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n'
            + STREAMS.format(wt=wt, wq=wq) + f"[predicate]\n{predicate}\n[strategy]\nname = \"{strategy}\"\n")
    return parse_job(tomllib.loads(text))


def _sql(q):
    return "sql = '''" + q + "'''"


IV = ""   # (the interval forms give no windows)
PAIRS = [
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym",
     'equi = [["trades.sym", "quotes.sym"]]', True),
    ("SELECT * FROM trades t, quotes q WHERE t.sym = q.sym AND ABS(t.px - q.bid) < 0.05",
     'equi = [["trades.sym", "quotes.sym"]]\nband = [{left = "trades.px", right = "quotes.bid", eps = 0.05}]', True),
    ("SELECT t.*, q.* FROM trades AS t INNER JOIN quotes AS q ON ABS(q.bid - t.px) <= 2",
     'band = [{left = "quotes.bid", right = "trades.px", eps = 2, closed = true}]', True),
    ("SELECT * FROM trades JOIN quotes ON trades.px BETWEEN quotes.bid - 0.5 AND quotes.bid + 0.5",
     'band = [{left = "trades.px", right = "quotes.bid", eps = 0.5, closed = true}]', True),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts BETWEEN t.ts - INTERVAL '5' SECOND AND t.ts",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "trades", right = "quotes", lower = "-5s", upper = "0s" }', False),
    ("SELECT * FROM trades t, quotes q WHERE t.sym = q.sym AND q.ts >= t.ts - INTERVAL '250' MILLISECOND "
     "AND q.ts < t.ts + INTERVAL '2' SECOND",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "trades", right = "quotes", lower = "-250ms", upper = "2s", closed = "left" }', False),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.time > q.time - 1000 AND t.time <= q.time + 3000",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "quotes", right = "trades", lower = "-1000ms", upper = "3s", closed = "right" }', False),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts > t.ts - INTERVAL '1' MINUTE "
     "AND q.ts < t.ts + INTERVAL '1' SECOND",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "trades", right = "quotes", lower = "-60s", upper = "1s", closed = "neither" }', False),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym "
     "AND q.ts BETWEEN t.ts + INTERVAL '1' SECOND AND t.ts + INTERVAL '5' SECOND",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "trades", right = "quotes", lower = "1s", upper = "5s" }', False),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts > t.ts - INTERVAL '10' SECOND "
     "AND q.ts < t.ts - INTERVAL '5' SECOND",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "trades", right = "quotes", lower = "-10s", upper = "-5s", closed = "neither" }', False),
    ("SELECT * FROM trades t LEFT JOIN quotes q ON t.sym = q.sym "
     "AND q.ts BETWEEN t.ts - INTERVAL '5' SECOND AND t.ts",
     'equi = [["trades.sym", "quotes.sym"]]\nouter = ["trades"]\n'
     'interval = { left = "trades", right = "quotes", lower = "-5s", upper = "0s" }', False),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts >= t.ts - INTERVAL '0.25' SECOND "
     "AND q.ts < t.ts + INTERVAL '2' SECOND",
     'equi = [["trades.sym", "quotes.sym"]]\n'
     'interval = { left = "trades", right = "quotes", lower = "-250ms", upper = "2s", closed = "left" }', False),
    ("SELECT * FROM trades t RIGHT OUTER JOIN quotes q ON t.sym = q.sym",
     'equi = [["trades.sym", "quotes.sym"]]\nouter = ["quotes"]', True),
    ("SELECT * FROM quotes q FULL OUTER JOIN trades t ON t.sym = q.sym",
     'equi = [["trades.sym", "quotes.sym"]]\nouter = ["trades", "quotes"]', True),
]


@pytest.mark.parametrize("sql,toml,windows", PAIRS, ids=[str(k) for k in range(len(PAIRS))])
def test_each_sql_form_is_the_job_its_toml_form_is(sql, toml, windows):
    w = {} if windows else {"wt": "", "wq": ""}
    a, b = _job(_sql(sql), **w), _job(toml, **w)
    assert a.predicate == b.predicate
    assert [(s.window.kind, s.window.size) for s in a.streams] == [(s.window.kind, s.window.size) for s in b.streams]


def test_a_multi_way_join_for_psp():
    streams = "".join(f'[streams.{s}]\nschema = {{ k = "int32", v = "float32" }}\nwindow = "5ms"\n' for s in "ABC")

    def job(pred):
        return parse_job(tomllib.loads('[job]\nname = "m"\nts_unit = "ms"\n[input]\nstaged = "s"\n[output]\ndir = "o"\n'
                                       + streams + f'[predicate]\n{pred}\n[strategy]\nname = "psp"\n'))
    a = job(_sql("SELECT * FROM A a JOIN B b ON a.k = b.k JOIN C c ON b.k = c.k AND ABS(a.v - c.v) < 2"))
    b = job('equi = [["A.k", "B.k"], ["B.k", "C.k"]]\nband = [{left = "A.v", right = "C.v", eps = 2}]')
    assert a.predicate == b.predicate


REFUSED = [
    ("SELECT * FROM trades t LEFT JOIN quotes q ON t.sym = q.sym WHERE q.bid > t.px",
     "LEFT JOIN with WHERE q.bid > t.px: a WHERE filters the outer join's result"),
    ("SELECT * FROM trades t LEFT JOIN quotes q ON t.sym = q.sym WHERE t.px > 5", "put a condition on one stream in ON"),
    ("SELECT * FROM trades t, quotes q LEFT JOIN trades u ON u.sym = q.sym", "LEFT JOIN: an outer join"),
    ("SELECT t.sym, COUNT(*) FROM trades t JOIN quotes q ON t.sym = q.sym GROUP BY t.sym", "GROUP BY"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym ORDER BY t.px", "ORDER BY"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym LIMIT 10", "LIMIT"),
    ("SELECT DISTINCT t.sym FROM trades t JOIN quotes q ON t.sym = q.sym", "SELECT DISTINCT"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym OR t.px = q.bid", "OR (t.sym = q.sym OR t.px = q.bid)"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND (t.px = 5 OR q.bid = 3)",
     "OR (t.px = 5 OR q.bid = 3): conditions between streams must all hold"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.time > 5", "reads its ts"),
    ("SELECT * FROM trades t JOIN quotes q ON t.px > 5", "no condition between the streams"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.px > q.bid", "t.px > q.bid: a comparison other than"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym <> q.sym", "t.sym <> q.sym: <>"),
    ("SELECT * FROM trades t JOIN (SELECT * FROM quotes) q ON t.sym = q.sym", "only the job's streams"),
    ("SELECT * FROM trades t JOIN bids q ON t.sym = q.sym", "FROM bids: not a stream of this job"),
    ("SELECT * FROM trades t JOIN trades u ON t.sym = u.sym", "the stream appears twice"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = x.sym", "'x' is not a stream or alias"),
    ("SELECT * FROM trades t JOIN quotes q ON sym = q.sym", "qualify the column"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts >= t.ts - INTERVAL '5' SECOND",
     "bounds one side only"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts BETWEEN t.ts - INTERVAL '5' WEEK AND t.ts",
     "interval unit WEEK"),
    ("SELECT * FROM trades t JOIN quotes q ON NOT t.sym = q.sym", "NOT (NOT t.sym = q.sym)"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND my_udf(t.px, q.bid)", "a function or subquery"),
    ("SELECT * FROM trades t, quotes q", "no condition between the streams"),
    ("SELECT * FROM trades t", "one stream: a join needs two or more"),
    ("UPDATE trades SET px = 1", "expected a SELECT"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym; SELECT 1", "expected one statement, found 2"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym UNION SELECT * FROM trades", "expected a SELECT"),
    ("SELECT * FROM trades t JOIN quotes q USING (sym)", "USING join"),
    ("SELECT * FROM trades t JOIN quotes q ON ABS(t.px - q.bid) < -1", "a band's width must be positive"),
    ("SELEKT * FROM trades", "predicate.sql:"),
    ("SELECT * FROM trades t JOIN quotes q ON " + "(" * 3000 + "t.sym = q.sym" + ")" * 3000,
     "parentheses nested 3,000 deep; at most 32"),
    ("SELECT * FROM trades t JOIN quotes q ON " + " AND ".join(["t.sym = q.sym"] * 3000),
     "3,000 conditions joined by AND; at most 256"),
    ("SELECT * FROM trades t JOIN quotes q ON " + "(" * 40 + "t.sym = q.sym" + ")" * 40,
     "parentheses nested 40 deep"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts BETWEEN t.ts - 1e400 AND t.ts",
     "1e400 is out of range"),
    ("SELECT * FROM trades t JOIN quotes q ON ABS(t.px - q.bid) < 1e400", "1e400 is not a finite number"),
    ("SELECT t.px * 2 FROM trades t JOIN quotes q ON t.sym = q.sym", "SELECT t.px * 2: the result's columns"),
    ("SELECT *, t.px FROM trades t JOIN quotes q ON t.sym = q.sym", "SELECT * with other columns"),
    ("SELECT sym FROM trades t JOIN quotes q ON t.sym = q.sym", "SELECT sym: a column of trades and quotes"),
    ("SELECT size FROM trades t JOIN quotes q ON t.sym = q.sym", "SELECT size: no stream has a column 'size'"),
]


@pytest.mark.parametrize("sql,says", REFUSED, ids=[str(k) for k in range(len(REFUSED))])
def test_what_sql_cannot_say_is_refused_with_one_line_naming_the_clause(sql, says):
    with pytest.raises(ConfigError) as e:
        _job(_sql(sql), wt="", wq="")
    msg = str(e.value)
    assert "\n" not in msg and "predicate.sql: " in msg and says in msg, msg


CHECKED = [      # refused once the streams are known (their columns and types)
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND LN(t.px) > 1", "a function mpi-join does not know"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.size > 1",
     "predicate.sql: the condition on trades: size > 1: unknown column 'size'"),
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.px > 'a'", "the condition on trades: px > 'a'"),
    ("SELECT t.ts, q.ts FROM trades t JOIN quotes q ON t.sym = q.sym", "the column name 'ts' is given twice"),
]


@pytest.mark.parametrize("sql,says", CHECKED, ids=[str(k) for k in range(len(CHECKED))])
def test_a_filter_or_column_list_the_streams_cannot_give_is_refused_with_one_line(sql, says):
    with pytest.raises(ConfigError) as e:
        _job(_sql(sql))
    msg = str(e.value)
    assert "\n" not in msg and says in msg, msg


FILTERED = [
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.px = 5", {"trades": "px = 5"}, []),
    ("SELECT * FROM trades t, quotes q WHERE t.sym = q.sym AND t.sym IN (1, 2) AND (q.bid > 3 OR q.bid IS NULL) "
     "AND NOT q.sym = 7", {"trades": "sym IN (1, 2)", "quotes": "(bid > 3 OR bid IS NULL) AND (NOT sym = 7)"}, []),
    ("SELECT t.sym, q.bid AS b, px, q.ts AS quote_ts, t.seq FROM trades t JOIN quotes q ON t.sym = q.sym", {},
     [["sym", "trades.sym"], ["b", "quotes.bid"], ["px", "trades.px"], ["quote_ts", "quotes.ts"],
      ["seq", "trades.seq"]]),
    ("SELECT q.*, t.px FROM trades t LEFT JOIN quotes q ON t.sym = q.sym AND t.px > 2 AND q.bid BETWEEN 1 AND 2",
     {"trades": "px > 2", "quotes": "bid BETWEEN 1 AND 2"},
     [["quotes_ts", "quotes.ts"], ["quotes_sym", "quotes.sym"], ["quotes_bid", "quotes.bid"], ["px", "trades.px"]]),
]


@pytest.mark.parametrize("sql,filters,select", FILTERED, ids=[str(k) for k in range(len(FILTERED))])
def test_conditions_on_one_stream_are_its_filter_and_a_column_list_its_select(sql, filters, select):
    from mpi_join.join.sql import predicate_table
    t = predicate_table(sql, ["trades", "quotes"], "ms", schemas={"trades": ["sym", "px"], "quotes": ["sym", "bid"]})
    assert t.get("filter", {}) == filters and t.get("select", []) == select
    job = _job(_sql(sql))
    assert {s.name: s.filter for s in job.streams if s.filter} == t.get("filter", {})
    assert [[n, f"{job.streams[i].name}.{c}"] for n, i, c in job.select] == select
    assert all(s.null_flag for s in job.streams if s.filter)     # a row that fails its filter is flagged


def test_an_integer_duration_above_2_to_the_53_is_read_exactly():
    """`R.ts - 9007199254740993` in a nanosecond job is that many ns (read through a float it
    became -9007199254740992 ns, another join), as its TOML form is; in a millisecond job the same
    bound is past 100 years and refused quoting it exactly."""
    q = "SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts BETWEEN t.ts - 9007199254740993 AND t.ts"
    job = _job(_sql(q), "", "", unit="ns")
    twin = _job('equi = [["trades.sym", "quotes.sym"]]\ninterval = { left = "trades", right = "quotes", '
                'lower = "-9007199254740993ns", upper = "0s", closed = "both" }', "", "", unit="ns")
    assert job.predicate == twin.predicate and job.streams == twin.streams
    assert [s.window.size for s in job.streams] == [1, 9007199254740994]   # t.ts - q.ts <= ...993
    with pytest.raises(ConfigError, match="-9007199254740993ms"):
        _job(_sql(q), wt="", wq="")


def test_sql_and_the_toml_keys_are_not_given_together():
    with pytest.raises(ConfigError, match="predicate.sql: give the join as SQL or as equi, not both"):
        _job(_sql("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym") + '\nequi = [["trades.sym", "quotes.sym"]]')


def test_explain_prints_the_sql_and_the_toml_form_it_is_read_as(tmp_path):
    import numpy as np
    from conftest import write_job
    from test_first_hour import trades_quotes
    text = ('[job]\nname = "tq"\nts_unit = "ms"\n[input]\nstaged = "staged"\n[output]\ndir = "out"\n'
            '[streams.trades]\nschema = { sym = "int32", px = "float64" }\n'
            '[streams.quotes]\nschema = { sym = "int32", bid = "float64" }\n[predicate]\n'
            + _sql(PAIRS[4][0]) + '\n[strategy]\nname = "hash"\n')
    path, job = write_job(str(tmp_path), text, trades_quotes(np.random.default_rng(3), 400))
    p = cli("explain", path, "-n", "3")
    assert p.returncode == 0, p.stderr
    assert "join, as given in SQL: SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym" in p.stdout
    assert ('read as the TOML form: [predicate] equi = [["trades.sym", "quotes.sym"]]; interval = { left = '
            '"trades", right = "quotes", lower = "-5s", upper = "0s", closed = "both" }') in p.stdout, p.stdout
    assert "quotes.ts in [trades.ts - 5 s, trades.ts]" in p.stdout


def _readme_examples():
    """Each ```toml block of the README with a [predicate] table and a "# SQL:" line."""
    import os
    import re
    text = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")).read()
    out = []
    for block in re.findall(r"```toml\n(.*?)```", text, re.S):
        sql = [ln.split("# SQL:", 1)[1].strip() for ln in block.splitlines() if ln.startswith("# SQL:")]
        if "[predicate]" in block and sql:
            body = block[block.index("[predicate]"):].split("\n", 1)[1]
            body = body.split("\n[", 1)[0]
            out.append((body, sql[0]))
    return out


@pytest.mark.parametrize("toml,sql", _readme_examples())
def test_every_readme_join_example_has_its_sql_form(toml, sql):
    """The README's join examples each carry a "# SQL:" line: it is the job its TOML form is."""
    pred = tomllib.loads(toml)
    refs = [x for v in pred.get("equi", []) for x in v] + [x for b in pred.get("band", []) for x in (b["left"], b["right"])]
    cols = {}
    for r in refs:
        st, c = r.split(".")
        cols.setdefault(st, set()).add(c)
    iv = "interval" in pred
    schema = {n: ", ".join(f'{c} = "int64"' for c in sorted(cs)) for n, cs in cols.items()}
    streams = "".join(f"[streams.{n}]\nschema = {{ {schema[n]} }}\n" + ("" if iv else 'window = "5s"\n') for n in cols)
    head = '[job]\nname = "x"\nts_unit = "ms"\n[input]\nstaged = "s"\n[output]\ndir = "o"\n' + streams

    def job(p):
        return parse_job(tomllib.loads(head + f"[predicate]\n{p}\n[strategy]\nname = \"hash\"\n"))
    a, b = job(toml), job(_sql(sql))
    assert len(_readme_examples()) >= 3
    assert a.predicate == b.predicate and a.predicate.outer == b.predicate.outer
    assert [s.window for s in a.streams] == [s.window for s in b.streams] or iv
    assert [s.window.size for s in a.streams] == [s.window.size for s in b.streams]


@pytest.mark.parametrize("sql,toml", [
    # BETWEEN SYMMETRIC: between the smaller bound and the larger (it was read as plain BETWEEN)
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts BETWEEN SYMMETRIC t.ts AND t.ts - INTERVAL '5' SECOND",
     'lower = "-5s", upper = "0s"'),
    # an exponent in an interval's number (sqlglot read '1e3' as '1' E)
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND q.ts >= t.ts AND q.ts <= t.ts + INTERVAL '1e3' MILLISECOND",
     'lower = "0s", upper = "1000ms"'),
    # equal event times: an interval [0, 0] (it became an equi on a column `ts`)
    ("SELECT * FROM trades t JOIN quotes q ON t.sym = q.sym AND t.ts = q.ts", 'lower = "0s", upper = "0s"'),
], ids=["symmetric", "exponent", "ts-equals-ts"])
def test_sql_time_forms_read_as_their_toml_twins(sql, toml):
    job = _job(_sql(sql), "", "")
    twin = _job('equi = [["trades.sym", "quotes.sym"]]\ninterval = { left = "trades", right = "quotes", '
                + toml + ', closed = "both" }', "", "")
    assert job.predicate == twin.predicate and [s.window for s in job.streams] == [s.window for s in twin.streams]


def test_a_band_below_zero_joins_nothing_and_says_so():
    from mpi_join.storage.input_warnings import warnings
    job = _job(_sql("SELECT * FROM trades t JOIN quotes q ON ABS(t.px - q.bid) < 0"))
    man = {"streams": {n: {"count": 10, "ts_min": 1_700_000_000_000, "ts_max": 1_700_000_000_100}
                       for n in ("trades", "quotes")}}
    said = warnings(job, man)
    assert any("the band |trades.px - quotes.bid| < 0 holds for no pair" in w for w in said), said
