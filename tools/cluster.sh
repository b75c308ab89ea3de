#!/usr/bin/env bash
# `make cluster`: one PostgreSQL 15 and two pml replicas over it, all on loopback, data in
# ./pml-cluster. Runs in the foreground; Ctrl-C stops the replicas, then PostgreSQL (the data
# stays: the next `make cluster` starts on it). Ports: PML_CLUSTER_PG_PORT (55432),
# PML_CLUSTER_PORTS (50061 50062). PostgreSQL refuses to run as root: as root its tools run as
# the postgres user. The DSN reaches the replicas through PML_STORE, never their command line.
set -euo pipefail
root=$(pwd)/pml-cluster
pg_bin=${PML_PG_BIN:-/usr/lib/postgresql/15/bin}
pg_port=${PML_CLUSTER_PG_PORT:-55432}
read -r -a ports <<<"${PML_CLUSTER_PORTS:-50061 50062}"
pml=${PML_BIN:-.venv/bin/pml}
[[ -x $pg_bin/initdb ]] || { bash tools/system_deps.sh; }
as_postgres=()
if [[ $(id -u) == 0 ]]; then as_postgres=(runuser -u postgres --); fi

mkdir -p "$root/sockets"
if [[ ${#as_postgres[@]} -gt 0 ]]; then
    chown postgres "$root" "$root/sockets"  # (its parent directories must be searchable)
fi
if [[ ! -f $root/pg/PG_VERSION ]]; then
    "${as_postgres[@]}" "$pg_bin/initdb" -D "$root/pg" -U pml -A trust -E UTF8 --no-locale >/dev/null
fi
"${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$root/pg" -l "$root/postgres.log" -w \
    -o "-k $root/sockets -c listen_addresses=127.0.0.1 -p $pg_port" start >/dev/null
export PML_STORE="postgresql://pml@127.0.0.1:$pg_port/postgres"

pids=()
stop_all() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    "${as_postgres[@]}" "$pg_bin/pg_ctl" -D "$root/pg" -w -m fast stop >/dev/null || true
    echo "cluster stopped (data kept in $root)"
}
trap stop_all EXIT
trap 'exit 0' INT TERM

names=(a b)
for i in "${!ports[@]}"; do
    name=${names[$i]:-r$i}
    "$pml" serve --listen "127.0.0.1:${ports[$i]}" --data-dir "$root/replica-$name" \
        --page-token-secret-file "$root/page-token.key" --metrics-port $((ports[i] + 1000)) \
        --log-format text >"$root/replica-$name.log" 2>&1 &
    pids+=($!)
done
for port in "${ports[@]}"; do
    for _ in $(seq 1 300); do
        if .venv/bin/python - "$port" <<'PY' 2>/dev/null; then break; fi
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
channel = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1)
PY
        sleep 0.2
    done
done
cat <<TXT
PostgreSQL on 127.0.0.1:$pg_port (data $root/pg, log $root/postgres.log)
replica a on 127.0.0.1:${ports[0]} (metrics :$((ports[0] + 1000)), log $root/replica-a.log)
replica b on 127.0.0.1:${ports[1]} (metrics :$((ports[1] + 1000)), log $root/replica-b.log)
In another terminal:
  .venv/bin/pml record --server 127.0.0.1:${ports[0]} --intent "Read a JSON file" \\
      --code 'const d = await mcp.read_file({path: "a.json"}); return JSON.parse(d)' --tool read_file
  .venv/bin/pml suggest --server 127.0.0.1:${ports[1]} "load JSON from a file"
Ctrl-C stops the cluster.
TXT
wait
