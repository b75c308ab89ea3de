#!/usr/bin/env bash
# `make cluster`: one PostgreSQL 15 and two pml replicas over it, all on loopback, data in
# ./pml-cluster (PML_CLUSTER_DIR). Runs in the foreground; Ctrl-C stops the replicas, then
# PostgreSQL (the data stays: the next `make cluster` starts on it).
# Ports: free ones are picked unless given: PML_CLUSTER_PG_PORT (PostgreSQL), PML_CLUSTER_PORTS
# (the replicas, e.g. "50061 50062"; their metrics on port + 1000). A port that is taken, or a
# replica or PostgreSQL that does not start, stops the script at once, naming which and why
# (from its log). PostgreSQL refuses to run as root: as root its tools run as the postgres user.
# The DSN reaches the replicas through PML_STORE, never their command line.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${PML_CLUSTER_DIR:-$(pwd)/pml-cluster}
pg_bin=${PML_PG_BIN:-/usr/lib/postgresql/15/bin}
pml=${PML_BIN:-$repo/.venv/bin/pml}
python=${PML_PYTHON:-$repo/.venv/bin/python}
[[ -x $pg_bin/initdb ]] || { bash "$repo/tools/system_deps.sh"; }
as_postgres=()
if [[ $(id -u) == 0 ]]; then as_postgres=(runuser -u postgres --); fi

fail() {
    echo "make cluster: $*" >&2
    exit 1
}

# N free loopback ports, distinct (all held open while picking).
free_ports() {
    "$python" - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

# "taken" if something already listens on 127.0.0.1:PORT (or it cannot be bound).
port_taken() {
    "$python" - "$1" <<'PY'
import socket, sys
with socket.socket() as s:
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError as err:
        print(err.strerror or err)
        sys.exit(0)
sys.exit(1)
PY
}

# The line of a log that says why a process did not start.
why() {
    local pattern line
    for pattern in "could not bind" "address already in use" "error|fatal"; do
        line=$(grep -m1 -iE "$pattern" "$1" 2>/dev/null || true)
        [[ -z $line ]] || break
    done
    echo "${line:-no reason in its log; see $1}"
}

read -r -a picked <<<"$(free_ports 5)"
pg_port=${PML_CLUSTER_PG_PORT:-${picked[0]}}
if [[ -n ${PML_CLUSTER_PORTS:-} ]]; then
    read -r -a ports <<<"$PML_CLUSTER_PORTS"
    metrics=("$((ports[0] + 1000))" "$((ports[1] + 1000))")
else
    ports=("${picked[1]}" "${picked[2]}")
    metrics=("${picked[3]}" "${picked[4]}")
fi
[[ ${#ports[@]} == 2 ]] || fail "PML_CLUSTER_PORTS: give two ports, e.g. \"50061 50062\""
names=(a b)

# Given ports may be taken: say which before starting anything.
if reason=$(port_taken "$pg_port"); then
    fail "PostgreSQL cannot use port $pg_port: $reason (set PML_CLUSTER_PG_PORT, or unset it to pick a free port)"
fi
for i in 0 1; do
    for port in "${ports[$i]}" "${metrics[$i]}"; do
        if reason=$(port_taken "$port"); then
            fail "replica ${names[$i]} cannot use port $port: $reason (set PML_CLUSTER_PORTS, or unset it to pick free ports)"
        fi
    done
done

mkdir -p "$root/sockets"
if [[ ${#as_postgres[@]} -gt 0 ]]; then
    chown postgres "$root" "$root/sockets"  # (its parent directories must be searchable)
fi
if [[ ! -f $root/pg/PG_VERSION ]]; then
    "${as_postgres[@]}" "$pg_bin/initdb" -D "$root/pg" -U pml -A trust -E UTF8 --no-locale >/dev/null
fi
# A new log each start, so the reason read from it is this start's.
rm -f "$root/postgres.log" "$root"/replica-*.log
if ! "${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$root/pg" -l "$root/postgres.log" -w -t 60 \
    -o "-k $root/sockets -c listen_addresses=127.0.0.1 -p $pg_port" start >/dev/null 2>&1; then
    fail "PostgreSQL did not start on 127.0.0.1:$pg_port: $(why "$root/postgres.log")"
fi
export PML_STORE="postgresql://pml@127.0.0.1:$pg_port/postgres"

pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    "${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$root/pg" -w -m fast stop >/dev/null 2>&1 || true
    echo "cluster stopped (data kept in $root)"
}
trap stop_all EXIT
trap 'exit 0' INT TERM

for i in 0 1; do
    "$pml" serve --listen "127.0.0.1:${ports[$i]}" --data-dir "$root/replica-${names[$i]}" \
        --page-token-secret-file "$root/page-token.key" --metrics-port "${metrics[$i]}" \
        --log-format text >"$root/replica-${names[$i]}.log" 2>&1 &
    pids+=($!)
done

# Each replica serving (gRPC health), or the script stops as soon as one has exited. The
# deadline covers a first start that prepares the embedding model.
deadline=$((SECONDS + ${PML_CLUSTER_START_TIMEOUT:-600}))
exited() {  # fails, naming the first replica that is no longer running
    local j
    for j in 0 1; do
        if ! kill -0 "${pids[$j]}" 2>/dev/null; then
            fail "replica ${names[$j]} (127.0.0.1:${ports[$j]}, metrics :${metrics[$j]}) exited: $(why "$root/replica-${names[$j]}.log")"
        fi
    done
}
for i in 0 1; do
    while exited; ! "$python" - "${ports[$i]}" <<'PY' 2>/dev/null; do
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
channel = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1)
PY
        ((SECONDS < deadline)) || fail "replica ${names[$i]} (127.0.0.1:${ports[$i]}) not serving after ${PML_CLUSTER_START_TIMEOUT:-600} s; see $root/replica-${names[$i]}.log"
        sleep 0.2
    done
done
# A replica that lost a race for its port exits a moment after its neighbour serves there.
sleep 1
exited
cat <<TXT
PostgreSQL on 127.0.0.1:$pg_port (data $root/pg, log $root/postgres.log)
replica a on 127.0.0.1:${ports[0]} (metrics :${metrics[0]}, log $root/replica-a.log)
replica b on 127.0.0.1:${ports[1]} (metrics :${metrics[1]}, log $root/replica-b.log)
In another terminal:
  .venv/bin/pml record --server 127.0.0.1:${ports[0]} --intent "Read a JSON file" \\
      --code 'const d = await mcp.read_file({path: "a.json"}); return JSON.parse(d)' --tool read_file
  .venv/bin/pml suggest --server 127.0.0.1:${ports[1]} "load JSON from a file"
Ctrl-C stops the cluster.
TXT
# Until Ctrl-C, or until a replica exits (then say so and stop the rest).
set +e
wait -n "${pids[@]}"
fail "a replica exited; its log: $root/replica-a.log, $root/replica-b.log"
