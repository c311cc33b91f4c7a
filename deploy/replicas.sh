#!/usr/bin/env bash
# Run several `evalset serve` replicas on one host, all on the same PostgreSQL database.
#
#   EVALSET_DATABASE_URL=postgresql+psycopg://evalset@127.0.0.1:5432/evalset \
#       deploy/replicas.sh 8001 8002 8003
#
# One replica per port, each with its own re-estimation worker; put a reverse proxy in
# front (deploy/nginx/evalset.conf). Every EVALSET_* setting in the environment reaches
# every replica (docs/service.md lists them). A replica that exits is started again on its
# port after a second while the others keep serving; one that exits within 10 s of its
# start 5 times in a row stops the set, which exits 1 for its supervisor. SIGTERM or
# SIGINT stops them all.
set -euo pipefail

if [ "$#" -lt 1 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
url="${EVALSET_DATABASE_URL:-}"
case "$url" in
    postgresql*) ;;
    *)
        echo "replicas.sh: EVALSET_DATABASE_URL must be a PostgreSQL URL (got '${url:-unset}'); " \
            "several replicas cannot share an embedded SQLite file" >&2
        exit 2
        ;;
esac
for port in "$@"; do
    case "$port" in
        '' | *[!0-9]*)
            echo "replicas.sh: '$port' is not a port number" >&2
            exit 2
            ;;
    esac
done

EVALSET="${EVALSET:-evalset}"
if ! command -v "$EVALSET" >/dev/null 2>&1; then
    echo "replicas.sh: '$EVALSET' not found; activate the project's .venv or set EVALSET" >&2
    exit 2
fi
FAST_EXIT_SECONDS="${REPLICAS_FAST_EXIT_SECONDS:-10}"
MAX_FAST_EXITS="${REPLICAS_MAX_FAST_EXITS:-5}"

# One supervisor (a subshell) per port: it runs the replica, starts it again when it exits,
# and on SIGTERM stops it (uvicorn finishes requests in flight within 10 s; then SIGKILL).
supervise() {
    local port="$1" child="" fast=0 started status
    trap 'stop_child; exit 0' TERM INT
    stop_child() {
        [ -n "$child" ] || return 0
        kill -TERM "$child" 2>/dev/null || true
        for _ in $(seq 1 30); do
            kill -0 "$child" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    }
    while true; do
        started=$SECONDS
        "$EVALSET" serve --host "${EVALSET_HOST:-127.0.0.1}" --port "$port" &
        child=$!
        echo "replicas.sh: replica on port $port (pid $child)" >&2
        status=0
        wait "$child" || status=$?
        child=""
        if [ $((SECONDS - started)) -lt "$FAST_EXIT_SECONDS" ]; then
            fast=$((fast + 1))
        else
            fast=0
        fi
        if [ "$fast" -ge "$MAX_FAST_EXITS" ]; then
            echo "replicas.sh: replica on port $port exited $fast times within" \
                "${FAST_EXIT_SECONDS} s of starting (last status $status); giving up" >&2
            exit 1
        fi
        echo "replicas.sh: replica on port $port exited (status $status); starting it again" >&2
        sleep 1
    done
}

# The first replica applies the migrations; the others wait for it (an advisory lock),
# so starting them together is safe.
pids=()
stop() {
    trap - TERM INT
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 40); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait || true
}
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT
for port in "$@"; do
    supervise "$port" &
    pids+=("$!")
done
# a supervisor returns only when its replica keeps failing at start: stop the set and fail,
# so that a supervisor with Restart=on-failure starts it again
status=0
wait -n || status=$?
echo "replicas.sh: a replica keeps failing (status $status); stopping the others" >&2
stop
exit 1
