"""Flink SQL's interval join from two Kafka topics to a third, exactly once: the peer of
`mpi-join bench kafka` (tools/bench_kafka.py writes the spec and measures the result topic).

Run by the Python of the Flink environment (`make flink`), as a script that imports only pyflink
and the standard library, with Flink SQL's Kafka connector jar (fetched with Maven:
services/maven.py, bundle "flink-kafka") on the pipeline's classpath:

    python flink_kafka.py SPEC.json

SPEC: {"servers", "r", "s", "out" (topics), "jar", "parallelism", "checkpoint_ms",
"checkpoints" (a folder), "window_ms", "lateness_ms", "group"}. Each input record is a CSV line `t,k,v` (t the event
time in ms); each table gets the rowtime `ts AS TO_TIMESTAMP_LTZ(t, 3)` with the watermark
`ts - lateness` (per Kafka partition, Flink's own). The join is mpi-join's two-way window
join on k with both windows `window_ms` (|R.t - S.t| < window_ms), written as Flink users
write an interval join; its rows go to `out` as JSON through the exactly-once sink (one
Kafka transaction per checkpoint, so a read_committed consumer sees a result when the
checkpoint after it completes). The job runs until the process is ended.
"""
import json
import sys


def main(spec_path):
    from pyflink.table import EnvironmentSettings, TableEnvironment
    with open(spec_path) as f:
        spec = json.load(f)
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("pipeline.jars", f"file://{spec['jar']}")
    conf.set("parallelism.default", str(int(spec["parallelism"])))
    conf.set("execution.checkpointing.interval", f"{int(spec['checkpoint_ms'])} ms")
    conf.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    # the join's state outgrows the job manager's memory storage (5 MB) at 25,000 records/s
    conf.set("execution.checkpointing.storage", "filesystem")
    conf.set("execution.checkpointing.dir", f"file://{spec['checkpoints']}")
    late = int(spec["lateness_ms"]) / 1000
    for name in ("r", "s"):
        env.execute_sql(
            f"CREATE TEMPORARY TABLE `{name}` (`t` BIGINT, `k` BIGINT, `v` DOUBLE, "
            f"`ts` AS TO_TIMESTAMP_LTZ(`t`, 3), WATERMARK FOR `ts` AS `ts` - INTERVAL '{late:.3f}' SECOND) "
            f"WITH ('connector' = 'kafka', 'topic' = '{spec[name]}', "
            f"'properties.bootstrap.servers' = '{spec['servers']}', 'properties.group.id' = '{spec['group']}', "
            f"'properties.isolation.level' = 'read_committed', "
            f"'scan.startup.mode' = 'earliest-offset', 'format' = 'csv')")
    env.execute_sql(
        "CREATE TEMPORARY TABLE `joined` (`r_t` BIGINT, `s_t` BIGINT, `k` BIGINT, `r_v` DOUBLE, `s_v` DOUBLE) "
        f"WITH ('connector' = 'kafka', 'topic' = '{spec['out']}', "
        f"'properties.bootstrap.servers' = '{spec['servers']}', 'format' = 'json', "
        f"'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{spec['group']}', "
        f"'properties.transaction.timeout.ms' = '600000')")
    w = (int(spec["window_ms"]) - 1) / 1000
    result = env.execute_sql(
        "INSERT INTO `joined` SELECT r.t, s.t, r.k, r.v, s.v FROM `r` r, `s` s WHERE r.k = s.k AND "
        f"s.ts BETWEEN r.ts - INTERVAL '{w:.3f}' SECOND AND r.ts + INTERVAL '{w:.3f}' SECOND")
    print("flink: job submitted", file=sys.stderr, flush=True)
    result.wait()


if __name__ == "__main__":
    main(sys.argv[1])
