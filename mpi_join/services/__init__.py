"""Development services: real HDFS, YARN and Kafka daemons started by the project itself."""
