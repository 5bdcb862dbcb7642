#!/bin/sh
# A standalone Spark cluster on this machine: one master and N workers as separate processes,
# started from the installed pyspark (spark-class ...deploy.master.Master / ...worker.Worker).
#
#   jobs/cluster/spark-standalone.sh up [N]     # master + N workers (default 2, 1 core and 1g each)
#   mpi-join stage job.toml --master spark://127.0.0.1:7077
#   mpi-join collect out --job job.toml --out out-collected --master spark://127.0.0.1:7077
#   jobs/cluster/spark-standalone.sh down
#
# Settings (environment): PYTHON (the Python with pyspark; default python3), SPARK_STANDALONE_DIR
# (pid files and logs; default /tmp/mpi-join-spark), SPARK_MASTER_HOST (127.0.0.1),
# SPARK_MASTER_PORT (7077), SPARK_MASTER_WEBUI_PORT (8080), SPARK_WORKER_CORES (1),
# SPARK_WORKER_MEMORY (1g). `up` returns once every worker has registered with the master.
set -eu
py=${PYTHON:-python3}
dir=${SPARK_STANDALONE_DIR:-/tmp/mpi-join-spark}
host=${SPARK_MASTER_HOST:-127.0.0.1}
port=${SPARK_MASTER_PORT:-7077}
ui=${SPARK_MASTER_WEBUI_PORT:-8080}

stop() {
    for f in "$dir"/*.pid; do
        [ -e "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
}

case "${1:-}" in
up)
    n=${2:-2}
    home=$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))') || {
        echo "spark-standalone: $py has no pyspark (set PYTHON)" >&2; exit 2; }
    class="$home/bin/spark-class"
    mkdir -p "$dir"
    if ls "$dir"/*.pid >/dev/null 2>&1; then
        echo "spark-standalone: already up (pid files in $dir); run down first" >&2; exit 2
    fi
    export SPARK_HOME="$home" SPARK_LOCAL_IP="$host" PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
    nohup "$class" org.apache.spark.deploy.master.Master --host "$host" --port "$port" --webui-port "$ui" \
        > "$dir/master.log" 2>&1 &
    echo $! > "$dir/master.pid"
    i=1
    while [ "$i" -le "$n" ]; do
        nohup "$class" org.apache.spark.deploy.worker.Worker "spark://$host:$port" --host "$host" \
            --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-1g}" --webui-port 0 \
            --work-dir "$dir/work-$i" > "$dir/worker-$i.log" 2>&1 &
        echo $! > "$dir/worker-$i.pid"
        i=$((i + 1))
    done
    # ready when the master's status page lists every worker as alive
    if ! "$py" - "$host" "$ui" "$n" <<'PY'
import json, sys, time, urllib.request
host, ui, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        st = json.load(urllib.request.urlopen(f"http://{host}:{ui}/json/", timeout=2))
        if sum(w.get("state") == "ALIVE" for w in st.get("workers", [])) >= n:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
    then
        echo "spark-standalone: the workers did not register within 120 s; logs in $dir" >&2
        stop
        exit 1
    fi
    echo "spark-standalone: master spark://$host:$port with $n worker(s) (UI http://$host:$ui, logs in $dir)"
    ;;
down)
    stop
    echo "spark-standalone: stopped"
    ;;
*)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
