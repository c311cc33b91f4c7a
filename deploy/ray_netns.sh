#!/usr/bin/env bash
# A two-host Ray cluster on one machine: head and worker in separate network
# namespaces joined by a veth pair. A local rehearsal of a real cluster
# (tests/adaptive/prompts/test_ray_multihost.py runs exactly this script). Needs root and iproute2.
#
#   deploy/ray_netns.sh up               # namespaces NAME-head (10.77.0.1), NAME-work (10.77.0.2)
#   deploy/ray_netns.sh exec CMD ...     # CMD on the head host, with RAY_ADDRESS=10.77.0.1:6379
#                                        # (and the cluster's auth token)
#   deploy/ray_netns.sh down             # stop every process of both hosts, remove them
#
# Environment: NETNS_NAME (default "evray", at most 13 characters: it also names the veth
# ends), RAY_CPUS_PER_HOST (default 1), RAY_OBJECT_STORE_BYTES (default 100 MB),
# RAY_BIN (default: this checkout's .venv/bin/ray, else the ray on PATH).
set -euo pipefail

cmd=${1:?usage: ray_netns.sh up|exec|down [NAME] ...}
shift
name=${NETNS_NAME:-evray}
[[ ${#name} -le 13 ]] || { echo "NAME must be at most 13 characters" >&2; exit 2; }

head_ns=$name-head
work_ns=$name-work
head_ip=10.77.0.1
work_ip=10.77.0.2
port=6379
cpus=${RAY_CPUS_PER_HOST:-1}
store=${RAY_OBJECT_STORE_BYTES:-100000000}
here=$(cd "$(dirname "$0")/.." && pwd)
ray_bin=${RAY_BIN:-$( [[ -x $here/.venv/bin/ray ]] && echo "$here/.venv/bin/ray" || command -v ray )}
# short temp dirs: Ray's unix sockets live under them (108-byte path limit)
head_tmp=/tmp/$name-head
work_tmp=/tmp/$name-work
# Ray >= 2.59 turns token authentication on by default for some clusters and reads
# ~/.ray/auth_token when it exists: every process of the rehearsal (both hosts, the
# driver, the state API) uses token auth with this cluster's own token instead
token=/tmp/$name-token
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$token

stop_ns() {
    # every process in the namespace was started by this script (or runs under `exec`):
    # ask them to stop, then kill what is left; `ray stop` would hit every Ray on the machine
    local ns=$1 pids
    ip netns list | awk '{print $1}' | grep -qxF "$ns" || return 0
    pids=$(ip netns pids "$ns" || true)
    [[ -n $pids ]] && kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 20); do
        pids=$(ip netns pids "$ns" || true)
        [[ -z $pids ]] && break
        sleep 0.5
    done
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
}

case $cmd in
up)
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$token")
    ip netns add "$head_ns"
    ip netns add "$work_ns"
    ip link add "$name-h" type veth peer name "$name-w"
    ip link set "$name-h" netns "$head_ns"
    ip link set "$name-w" netns "$work_ns"
    ip -n "$head_ns" addr add $head_ip/24 dev "$name-h"
    ip -n "$work_ns" addr add $work_ip/24 dev "$name-w"
    for ns in "$head_ns" "$work_ns"; do ip -n "$ns" link set lo up; done
    ip -n "$head_ns" link set "$name-h" up
    ip -n "$work_ns" link set "$name-w" up
    export RAY_USAGE_STATS_ENABLED=0
    # the dashboard serves the state API (which node ran which task) on head_ip:8265
    ip netns exec "$head_ns" "$ray_bin" start --head --node-ip-address $head_ip --port $port \
        --num-cpus "$cpus" --object-store-memory "$store" --temp-dir "$head_tmp" \
        --include-dashboard true --dashboard-host $head_ip --disable-usage-stats
    ip netns exec "$work_ns" "$ray_bin" start --address $head_ip:$port --node-ip-address $work_ip \
        --num-cpus "$cpus" --object-store-memory "$store" --temp-dir "$work_tmp" \
        --disable-usage-stats
    echo "Ray cluster up: head $head_ip:$port ($head_ns), worker $work_ip ($work_ns)"
    ;;
exec)
    [[ $# -gt 0 ]] || { echo "usage: ray_netns.sh exec CMD ..." >&2; exit 2; }
    exec ip netns exec "$head_ns" env RAY_ADDRESS=$head_ip:$port "$@"
    ;;
down)
    stop_ns "$work_ns"
    stop_ns "$head_ns"
    rm -rf "$head_tmp" "$work_tmp" "$token"
    ;;
*)
    echo "unknown command $cmd (up, exec, down)" >&2
    exit 2
    ;;
esac
