"""The configuration files of the development services: Hadoop's core-, hdfs- and yarn-site.xml
(one folder, HADOOP_CONF_DIR, read by the daemons and by Spark alike) and Kafka's
server.properties, every address on 127.0.0.1 at the ports chosen at the first start."""
import os
from xml.sax.saxutils import escape

# the ports each daemon listens on, by the name ports.json records them under
PORTS = {
    "namenode": ("nn_rpc", "nn_http"),
    "datanode": ("dn_data", "dn_http", "dn_ipc"),
    "resourcemanager": ("rm_rpc", "rm_scheduler", "rm_tracker", "rm_admin", "rm_web"),
    "nodemanager": ("nm_rpc", "nm_localizer", "nm_web"),
    "kafka": ("kafka", "kafka_controller"),
}


def _xml(props):
    body = "".join(f"<property><name>{escape(k)}</name><value>{escape(str(v))}</value></property>\n"
                   for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def write_hadoop(conf, root, p, memory_mb, vcores):
    """core-site.xml, hdfs-site.xml, yarn-site.xml and log4j.properties in `conf`; data under `root`."""
    a = lambda k: f"127.0.0.1:{p[k]}"        # noqa: E731
    files = {
        "core-site.xml": {"fs.defaultFS": f"hdfs://{a('nn_rpc')}", "hadoop.tmp.dir": os.path.join(root, "tmp")},
        "hdfs-site.xml": {
            "dfs.namenode.name.dir": "file://" + os.path.join(root, "hdfs", "name"),
            "dfs.datanode.data.dir": "file://" + os.path.join(root, "hdfs", "data"),
            "dfs.replication": 1, "dfs.permissions.enabled": "true",
            "dfs.namenode.rpc-address": a("nn_rpc"), "dfs.namenode.http-address": a("nn_http"),
            "dfs.datanode.address": a("dn_data"), "dfs.datanode.http.address": a("dn_http"),
            "dfs.datanode.ipc.address": a("dn_ipc"), "dfs.datanode.hostname": "127.0.0.1",
            # one DataNode: a client must not wait to replace it in a pipeline it cannot rebuild
            "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
            "dfs.namenode.safemode.extension": 0, "dfs.heartbeat.interval": 1,
            # a DataNode that is gone is dead after 2 x recheck + 10 heartbeats: about 30 s, not 10 min
            "dfs.namenode.heartbeat.recheck-interval": 10_000,
        },
        "yarn-site.xml": {
            "yarn.resourcemanager.hostname": "127.0.0.1",
            "yarn.resourcemanager.address": a("rm_rpc"), "yarn.resourcemanager.scheduler.address": a("rm_scheduler"),
            "yarn.resourcemanager.resource-tracker.address": a("rm_tracker"),
            "yarn.resourcemanager.admin.address": a("rm_admin"), "yarn.resourcemanager.webapp.address": a("rm_web"),
            "yarn.resourcemanager.scheduler.class":
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler",
            "yarn.nodemanager.hostname": "127.0.0.1",
            "yarn.nodemanager.address": a("nm_rpc"), "yarn.nodemanager.localizer.address": a("nm_localizer"),
            "yarn.nodemanager.webapp.address": a("nm_web"),
            "yarn.nodemanager.local-dirs": os.path.join(root, "yarn", "local"),
            "yarn.nodemanager.log-dirs": os.path.join(root, "yarn", "logs"),
            "yarn.nodemanager.resource.memory-mb": memory_mb, "yarn.nodemanager.resource.cpu-vcores": vcores,
            "yarn.scheduler.minimum-allocation-mb": 256, "yarn.scheduler.maximum-allocation-mb": memory_mb,
            "yarn.nodemanager.vmem-check-enabled": "false", "yarn.nodemanager.pmem-check-enabled": "false",
            # a nearly full disk of a development machine must not mark the only node unhealthy
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": 99.5,
            "yarn.nodemanager.env-whitelist": "JAVA_HOME,PATH,LANG,TZ,HADOOP_CONF_DIR,PYSPARK_PYTHON",
        },
    }
    os.makedirs(conf, exist_ok=True)
    for name, props in files.items():
        with open(os.path.join(conf, name), "w") as f:
            f.write(_xml(props))
    with open(os.path.join(conf, "log4j.properties"), "w") as f:
        f.write("log4j.rootLogger=INFO, console\nlog4j.appender.console=org.apache.log4j.ConsoleAppender\n"
                "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n\n")


def write_kafka(path, root, p):
    """Kafka's server.properties: one KRaft node, broker and controller, replication 1."""
    props = {
        "process.roles": "broker,controller", "node.id": 1,
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{p['kafka_controller']}",
        "listeners": f"PLAINTEXT://127.0.0.1:{p['kafka']},CONTROLLER://127.0.0.1:{p['kafka_controller']}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p['kafka']},CONTROLLER://127.0.0.1:{p['kafka_controller']}",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": os.path.join(root, "kafka", "data"), "num.partitions": 1,
        "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1, "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1, "group.initial.rebalance.delay.ms": 0,
    }
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))
