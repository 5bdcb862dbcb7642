"""Collection: a run's result part files -> one Parquet dataset, optionally with payloads, plus a
summary (result count, latency percentiles, per-rank figures)."""
import json

from ..errors import InputError
from . import fs

PCTS = (0.5, 0.9, 0.99, 0.999)


def collect(spark, job, run_dir, out, with_payload=False, files=1, progress=print):
    from pyspark.sql import functions as F
    run_dir, out = fs.qualify(run_dir), fs.qualify(out)
    rdir = f"{run_dir}/results"
    parts = [f for f in fs.list_files(spark, rdir) if f.endswith(".parquet")]
    if not parts:
        raise InputError(f"{rdir}: no result part files (is this a run's output directory?)")
    progress(f"collect: {len(parts)} part file(s) from {rdir}")
    res = spark.read.parquet(*parts).withColumn(
        "rank", F.regexp_extract(F.input_file_name(), r"part-r(\d+)-", 1).cast("int"))
    seq_cols = [f"{s.name}_seq" for s in job.streams]
    missing = [c for c in seq_cols if c not in res.columns]
    if missing:
        raise InputError(f"{rdir}: result column(s) {', '.join(missing)} missing; the job's streams are "
                         f"{', '.join(job.stream_names)}")
    res = res.persist()
    total = res.count()
    lat = res.select(F.percentile_approx("latency_ns", list(PCTS), 10000).alias("p")).collect()[0]["p"]
    per_rank = {r["rank"]: {"results": r["n"], "latency_ms": _pcts(r["p"])}
                for r in res.groupBy("rank").agg(F.count("*").alias("n"),
                                                   F.percentile_approx("latency_ns", list(PCTS), 10000).alias("p")).collect()}
    data = res.drop("rank")
    if with_payload:
        for s in job.streams:
            staged = spark.read.parquet(f"{fs.qualify(job.staged)}/{s.name}")
            cols = [F.col("seq").alias(f"{s.name}_seq")] + [F.col(c).alias(f"{s.name}_{c}") for c in ["ts", *s.schema]]
            data = data.join(staged.select(*cols), on=f"{s.name}_seq", how="left")
    data.coalesce(max(1, files)).write.mode("overwrite").parquet(out)
    metrics = fs.read_text(spark, f"{run_dir}/metrics/summary.json")
    summary = {
        "results": int(total), "latency_ms": _pcts(lat),
        "per_rank": {str(k): v for k, v in sorted(per_rank.items())},
        "run": json.loads(metrics) if metrics else None,
        "with_payload": bool(with_payload), "output": out,
    }
    if summary["run"]:
        for r in summary["run"].get("ranks", []):
            summary["per_rank"].setdefault(str(r["rank"]), {}).update(
                {k: r.get(k) for k in ("role", "tuples_in", "tuples_out", "cpu_s", "idle_s", "comm_s")})
    fs.write_text(spark, f"{out}/_summary.json", json.dumps(summary, indent=2))
    res.unpersist()
    progress(f"collect: {total:,} results -> {out}")
    return summary


def _pcts(p):
    if p is None:
        return {f"p{q * 100:g}": None for q in PCTS}
    return {f"p{q * 100:g}": v / 1e6 for q, v in zip(PCTS, p)}
