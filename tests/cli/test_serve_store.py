"""`pml serve` over a PostgreSQL store that refuses its login (a real throwaway cluster asking
for passwords): one line naming the setting that gave the store, never the password."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testing.postgres_cluster import PostgresCluster

ROOT = Path(__file__).resolve().parents[2]
WRONG = "wr0ng-s3cret-pw"


@pytest.fixture(scope="module")
def login_dsn() -> Iterator[str]:
    """A database of a cluster that asks `pwuser` for its password over TCP; its DSN as
    `pwuser`, no password in it."""
    root = Path(tempfile.mkdtemp(prefix="pml-pg-login-"))
    os.chmod(root, 0o755)
    cluster = PostgresCluster(root)
    cluster.init()
    (cluster.data / "pg_hba.conf").write_text(
        "local all all trust\n"
        "host all pml 127.0.0.1/32 trust\n"
        "host all all 127.0.0.1/32 scram-sha-256\n"
    )
    cluster.start()
    try:
        dsn = cluster.create_database()
        with psycopg.connect(cluster.dsn(), autocommit=True) as db:
            db.execute("CREATE ROLE pwuser LOGIN PASSWORD 'the-right-one'")
        yield dsn.replace("//pml@", "//pwuser@")
    finally:
        cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.postgres
@pytest.mark.parametrize("given", ["PML_STORE", "--store", "engine.store"])
def test_a_wrong_password_is_one_line_naming_the_setting_never_the_password(
    login_dsn: str, tmp_path: Path, given: str
) -> None:
    """The refusal said `cannot reach PostgreSQL at ...: password authentication failed`, not
    which of `--store`, `PML_STORE` or a config file's `engine.store` to fix."""
    env = {**os.environ, "PGPASSWORD": WRONG}
    args = [sys.executable, "-m", "pml_server.cli", "serve", "--listen", "127.0.0.1:0"]
    args += ["--embedder", "hashing", "--data-dir", str(tmp_path / "data")]
    if given == "PML_STORE":
        env["PML_STORE"] = login_dsn.replace("//pwuser@", f"//pwuser:{WRONG}@")
    elif given == "--store":
        env.pop("PML_STORE", None)
        args += ["--store", login_dsn]  # the password from PGPASSWORD
    else:
        env.pop("PML_STORE", None)
        config = tmp_path / "pml.toml"
        config.write_text(f'[engine]\nstore = "{login_dsn}"\n')
        args += ["--config", str(config)]
        given = f"{config}: engine.store"
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    where = login_dsn.split("@", 1)[1]
    assert done.stderr.startswith(f"pml serve: error: {given}: cannot reach PostgreSQL at {where}")
    assert 'password authentication failed for user "pwuser"' in done.stderr
    assert done.stderr.count("\n") == 1
    assert WRONG not in done.stderr + done.stdout
