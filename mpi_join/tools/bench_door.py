"""`mpi-join bench door`: raw CSV in, result Parquet with payloads out, against DuckDB doing the same
join on the same files in the same run: the door every user meets first (stage, run, collect).

The workload is a click log joined to the impressions it came from, as Flink SQL users write it:
same `ad_id` and `user_id`, the click 0 to 30 minutes after the impression. Impressions and
clicks land as CSV files (the time column not first), ISO-8601 times with milliseconds and the
offsets `Z`, `+05:30` and `-05:00`, text ids, Zipf-skewed users, nulls in the payload columns
(`country`, `device`) and a few rows with an unreadable time. The mpi-join answer is checked
pair for pair against DuckDB's before any time is printed."""
import os
import subprocess
import sys
import time

import numpy as np

JOB = """\
[job]
name = "clicks"
ts_unit = "ms"
[input]
staged = "staged"
[output]
dir = "out"
[streams.imp]
schema = {{ imp_id = "string", ad_id = "string", user_id = "string", country = "char2", device = "char8" }}
raw = {{ path = "raw/imp", format = "csv", time = "ts", time_unit = "timestamp" }}
[streams.click]
schema = {{ click_id = "string", ad_id = "string", user_id = "string", device = "char8" }}
raw = {{ path = "raw/click", format = "csv", time = "ts", time_unit = "timestamp" }}
[predicate]
equi = [["imp.ad_id", "click.ad_id"], ["imp.user_id", "click.user_id"]]
interval = {{ left = "imp", right = "click", lower = "0s", upper = "30min" }}
[strategy]
name = "{strategy}"
"""

ZONES = (("Z", 0), ("+05:30", 330), ("-05:00", -300))


def _iso(ms, zone_idx):
    """ISO-8601 text with milliseconds of epoch-ms times, each in one of ZONES."""
    out = np.empty(len(ms), object)
    for k, (z, off) in enumerate(ZONES):
        sel = zone_idx == k
        local = (ms[sel] + off * 60_000).astype("datetime64[ms]")
        out[sel] = [f"{str(t).replace('T', 'T')}{z}" for t in local]
    return out


def generate(root, impressions=1_000_000, clicks=200_000, files=49, bad=9, seed=1, strategy="hash", say=print):
    """The workload's raw files and job under `root`; returns the job file's path."""
    rng = np.random.default_rng(seed)
    t0 = np.int64(1_772_323_200_000)                 # 2026-03-01T00:00:00Z
    span = 6 * 3600 * 1000
    users = 100_000
    p = np.arange(1, users + 1, dtype=np.float64) ** -0.8          # Zipf-skewed users (exponent 0.8)
    p /= p.sum()
    n_imp_files = max(1, files * impressions // (impressions + clicks))
    imp_ts = np.sort(t0 + rng.integers(0, span, impressions))
    imp_ad = rng.integers(0, 500, impressions)
    imp_user = rng.choice(users, impressions, p=p)
    # a click follows an impression (a fifth of them within 30 minutes) or is random
    src = rng.integers(0, impressions, clicks)
    follow = rng.random(clicks) < 0.9
    click_ts = np.where(follow, imp_ts[src] + rng.integers(0, 45 * 60_000, clicks), t0 + rng.integers(0, span, clicks))
    click_ad = np.where(follow, imp_ad[src], rng.integers(0, 500, clicks))
    click_user = np.where(follow, imp_user[src], rng.choice(users, clicks, p=p))
    o = np.argsort(click_ts, kind="stable")
    click_ts, click_ad, click_user = click_ts[o], click_ad[o], click_user[o]
    country = np.array(["us", "in", "de", "br", ""])[rng.integers(0, 5, impressions)]      # "": a null
    dev = np.array(["ios", "android", "web", ""])
    for name, n, cols, nf in (
            ("imp", impressions, lambda i: [f"i{i}", f"ad{imp_ad[i]}", f"u{imp_user[i]}", None, country[i],
                                            dev[rng.integers(0, 4)]], n_imp_files),
            ("click", clicks, lambda i: [f"c{i}", f"ad{click_ad[i]}", f"u{click_user[i]}", None,
                                         dev[rng.integers(0, 4)]], files - n_imp_files)):
        d = os.path.join(root, "raw", name)
        os.makedirs(d, exist_ok=True)
        ts = imp_ts if name == "imp" else click_ts
        iso = _iso(ts, rng.integers(0, 3, n))
        header = (["imp_id", "ad_id", "user_id", "ts", "country", "device"] if name == "imp" else
                  ["click_id", "ad_id", "user_id", "ts", "device"])
        bounds = np.linspace(0, n, nf + 1).astype(int)
        badrows = set(rng.choice(n, bad // 2 + (name == "imp") * (bad % 2), replace=False).tolist())
        for k in range(nf):
            with open(os.path.join(d, f"part-{k:03d}.csv"), "w") as f:
                f.write(",".join(header) + "\n")
                lines = []
                for i in range(bounds[k], bounds[k + 1]):
                    row = cols(i)
                    row[3] = "unknown" if i in badrows else iso[i]
                    lines.append(",".join(row))
                f.write("\n".join(lines) + "\n")
        say(f"bench door: {n:,} {name} rows in {nf} files -> {d}")
    path = os.path.join(root, "job.toml")
    with open(path, "w") as f:
        f.write(JOB.format(strategy=strategy))
    return path


def duckdb_door(root, out, threads=None):
    """DuckDB's whole join from the raw CSV into Parquet with payloads: (result rows, seconds)."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    t0 = time.perf_counter()
    for name in ("imp", "click"):       # read as text, then the times (try_cast: an unreadable one is null)
        con.execute(f"CREATE TABLE {name}_raw AS SELECT * FROM read_csv('{root}/raw/{name}/*.csv', header = true, "
                    f"all_varchar = true)")
        con.execute(f"CREATE TABLE {name} AS SELECT * REPLACE (try_cast(ts AS TIMESTAMPTZ) AS ts) FROM {name}_raw")
    con.execute(f"COPY (SELECT i.*, c.* FROM imp i JOIN click c ON i.ad_id = c.ad_id AND i.user_id = c.user_id "
                f"AND c.ts BETWEEN i.ts AND i.ts + INTERVAL 30 MINUTE) TO '{out}' (FORMAT parquet)")
    el = time.perf_counter() - t0
    n = con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]
    pairs = con.execute(f"SELECT imp_id, click_id FROM read_parquet('{out}')").fetchall()
    con.close()
    return n, el, {(a, b) for a, b in pairs}


def _timed(cmd, say, env=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    el = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-1500:]}")
    return el, r


def one_per_core():
    """A rank per core this process may run on (ranks.cpus), as DuckDB runs a thread per core; at least 2."""
    from ..ranks import cpus
    return max(2, cpus())


def bench_door(work, nprocs=(3,), impressions=1_000_000, clicks=200_000, spark=True, say=print):
    """Generate, then time DuckDB, `pipeline` (in process where it can) at each rank count of
    `nprocs`, and the Spark engines of `stage` and `collect` on the same files; check every
    answer agrees with DuckDB's. Returns the figures (`pipeline_s` and `ratio`: the first count's)."""
    import pyarrow.parquet as pq
    from ..launch import mpiexec_cmd
    nprocs = list(nprocs)
    path = generate(work, impressions, clicks, say=say)
    me = [sys.executable, "-m", "mpi_join"]
    n_duck, t_duck, want = duckdb_door(work, os.path.join(work, "duck.parquet"))
    say(f"bench door: DuckDB: {n_duck:,} results into Parquet in {t_duck:.2f} s")
    per_n = {}
    for n in nprocs:
        t_pipe, r = _timed(me + ["pipeline", path, "-n", str(n), "--with-payload", "--overwrite", "--force",
                                 "--collect-out", os.path.join(work, "collected")], say)
        summary = [ln for ln in r.stderr.splitlines() if ln.startswith("pipeline: done")]
        t = pq.read_table(os.path.join(work, "collected"), columns=["imp_imp_id", "click_click_id"])
        got = {(a.rstrip("\0") if a else a, b) for a, b in zip(t.column(0).to_pylist(), t.column(1).to_pylist())}
        if got != want or t.num_rows != n_duck:
            raise RuntimeError(f"bench door: mpi-join's {t.num_rows:,} results (-n {n}) differ from DuckDB's "
                               f"{n_duck:,} ({len(got - want):,} not in DuckDB's, {len(want - got):,} missing)")
        say(f"bench door: pipeline -n {n}: {t.num_rows:,} results, equal to DuckDB's pair for pair, in {t_pipe:.2f} s "
            f"({summary[0] if summary else ''})")
        per_n[n] = t_pipe
    t_pipe = per_n[nprocs[0]]
    fig = {"duckdb_s": t_duck, "pipeline_s": t_pipe, "results": n_duck, "ratio": t_pipe / t_duck,
           "pipeline_s_by_ranks": {str(n): v for n, v in per_n.items()}}
    if spark:
        t_stage, _ = _timed(me + ["stage", "--engine", "spark", "--force", path], say)
        t_run, _ = _timed(mpiexec_cmd(nprocs[0], ["run", path, "--overwrite"]), say)
        t_coll, _ = _timed(me + ["collect", os.path.join(work, "out"), "--job", path, "--out",
                                 os.path.join(work, "collected-spark"), "--with-payload", "--engine", "spark",
                                 "--overwrite"], say)
        fig.update(stage_spark_s=t_stage, run_s=t_run, collect_spark_s=t_coll)
        say(f"bench door: stage --engine spark {t_stage:.1f} s, run {t_run:.1f} s, collect --engine spark "
            f"{t_coll:.1f} s (each a command of its own: a JVM start each)")
    for n, v in per_n.items():
        say(f"bench door: pipeline -n {n} / DuckDB = {v / t_duck:.2f}x ({v:.2f} s against {t_duck:.2f} s)")
    return fig
