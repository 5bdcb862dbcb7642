#!/bin/sh
# Hydra's "ssh" launcher for namespace hosts (netns-hosts.sh): called as
# `netns-launch.sh [ssh options] HOST COMMAND...`, it runs COMMAND in the network namespace
# HOST, with HOST as the hostname (its own UTS namespace).
while [ $# -gt 0 ]; do
    case "$1" in -*) shift ;; *) break ;; esac
done
host=$1
shift
exec ip netns exec "$host" unshare --uts /bin/sh -c "hostname $host && $*"
