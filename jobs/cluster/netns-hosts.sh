#!/bin/sh
# Hosts on one machine: N Linux network namespaces ("hosts") joined by a bridge, with real TCP
# between them, so that a multi-host MPI run (and a cut link) can be tried without a cluster.
#
#   jobs/cluster/netns-hosts.sh up 3                  # hosts mjh1..mjh3 at 10.77.0.1..3 (root)
#   jobs/cluster/netns-hosts.sh mpiexec -n 3 mpi-join run job.toml     # one rank per host
#   jobs/cluster/netns-hosts.sh mpiexec --per-host 2 -n 6 mpi-join run job.toml
#   ip netns exec mjh1 ip link set vmjh3 down ... (from the bridge: ip -n mjhbr link set bmjh3 down)
#   jobs/cluster/netns-hosts.sh down                  # remove them (veths and bridge go too)
#
# mpiexec runs inside the first host and starts ranks through netns-launch.sh (Hydra's "ssh"
# launcher, entering a namespace instead of logging in). MPI traffic is forced onto TCP
# (UCX_TLS=tcp,self; without it MPICH sees one machine and uses shared memory). Each host has
# its own hostname (a UTS namespace), so the run's rank-to-host map shows mjh1, mjh2, ...
# MPI_JOIN_NETNS_PREFIX changes the "mjh" prefix. Only addresses in these namespaces are used.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
p=${MPI_JOIN_NETNS_PREFIX:-mjh}
br="${p}br"
hosts() { ip netns list | awk '{print $1}' | grep -E "^${p}[0-9]+\$" | sort -V; }

case "${1:-}" in
up)
    n=${2:-3}
    [ "$(id -u)" = 0 ] || { echo "netns-hosts: must run as root (ip netns)" >&2; exit 2; }
    [ -z "$(hosts)" ] || { echo "netns-hosts: hosts exist already ($(hosts | tr '\n' ' ')); run down first" >&2; exit 2; }
    ip netns add "$br"
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 up
    i=1
    while [ "$i" -le "$n" ]; do
        h="$p$i"
        ip netns add "$h"
        ip link add "v$h" type veth peer name "b$h"
        ip link set "v$h" netns "$h"
        ip link set "b$h" netns "$br"
        ip -n "$br" link set "b$h" master br0
        ip -n "$br" link set "b$h" up
        ip -n "$h" link set lo up
        ip -n "$h" addr add "10.77.0.$i/24" dev "v$h"
        ip -n "$h" link set "v$h" up
        i=$((i + 1))
    done
    echo "netns-hosts: $(hosts | tr '\n' ' ')up (10.77.0.1..$n/24, bridge in namespace $br)"
    ;;
down)
    for h in $(hosts); do ip netns del "$h"; done
    ip netns del "$br" 2>/dev/null || true
    echo "netns-hosts: removed"
    ;;
mpiexec)
    shift
    per=1
    if [ "${1:-}" = "--per-host" ]; then per=$2; shift 2; fi
    list=$(hosts | sed "s/\$/:$per/" | paste -sd, -)
    [ -n "$list" ] || { echo "netns-hosts: no hosts; run: $0 up N" >&2; exit 2; }
    first=$(hosts | head -n 1)
    mpiexec=${MPIEXEC:-$(command -v mpiexec)}
    exec ip netns exec "$first" env UCX_TLS=tcp,self "$mpiexec" -launcher ssh \
        -launcher-exec "$here/netns-launch.sh" -iface "v$first" -hosts "$list" "$@"
    ;;
*)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
