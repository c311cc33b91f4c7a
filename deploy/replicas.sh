#!/usr/bin/env bash
# Run several `evalset serve` replicas on one host, all on the same PostgreSQL database.
#
#   EVALSET_DATABASE_URL=postgresql+psycopg://evalset@127.0.0.1:5432/evalset \
#       deploy/replicas.sh 8001 8002
#
# One replica per port, each with its own re-estimation worker; put a reverse proxy in
# front (deploy/nginx/evalset.conf). Every EVALSET_* setting in the environment reaches
# every replica (docs/service.md lists them). SIGTERM or SIGINT stops them all; if one
# replica exits, the others are stopped and the script exits with its status (1 if that
# was 0), so a supervisor (systemd, a container runtime) restarts the set.
set -euo pipefail

if [ "$#" -lt 1 ]; then
    sed -n '2,11p' "$0" >&2
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

# The first replica applies the migrations; the others wait for it (an advisory lock),
# so starting them together is safe.
pids=()
stop() {
    trap - TERM INT
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    # uvicorn finishes requests in flight within 10 s; then no more waiting
    for _ in $(seq 1 30); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait
}
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT
for port in "$@"; do
    "$EVALSET" serve --host "${EVALSET_HOST:-127.0.0.1}" --port "$port" &
    pids+=("$!")
    echo "replicas.sh: replica on port $port (pid $!)" >&2
done
status=0
wait -n || status=$?
echo "replicas.sh: a replica exited (status $status); stopping the others" >&2
stop
# a replica that stopped on its own is a failure of the set, whatever its status,
# so that a supervisor with Restart=on-failure starts the set again
[ "$status" -eq 0 ] && status=1
exit "$status"
