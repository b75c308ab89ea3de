"""`make dist`'s server wheel installs into a fresh virtualenv outside the repository (with the
pml-client wheel it depends on), and that install serves with the default model: it records,
suggests (in English and, through the cross-lingual companion, in French), and `pml --version`
is the package's version."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.packaging import (
    ROOT,
    build_client_wheel,
    build_server_wheel,
    clean_env,
    fresh_venv,
    pip_install,
)
from tests.support import stop_pml_serve

pytestmark = pytest.mark.slow

CODE = 'const d = await mcp.read_file({path: "FILE"}); return await mcp.parse_json(d)'


def test_the_server_wheel_installs_and_serves(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    wheels = [build_server_wheel(dist), build_client_wheel(dist)]
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, *wheels)
    pml = str(python.parent / "pml")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = clean_env()

    version = subprocess.run(
        [pml, "--version"], cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.strip() == f"pml {expected}", version.stderr
    located = subprocess.run(
        [str(python), "-c", "import pml_server, pml_client; print(pml_server.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert located.stdout.startswith(str(tmp_path / "venv")), located.stdout + located.stderr

    # `pml serve` with its defaults (MiniLM, sync), from the installed package alone.
    proc = subprocess.Popen(
        [pml, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(work / "data")],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = re.search(r"\(port (\d+)\)", line)
        assert port, f"pml serve did not start: {line!r}"
        client_env = {**env, "PML_SERVER": f"127.0.0.1:{port.group(1)}"}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [pml, *args], cwd=work, env=client_env, capture_output=True, text=True, timeout=120
            )

        for intent, name in (("Read JSON file", "a.json"), ("Parse JSON from disk", "b.json")):
            done = cli(
                "record",
                "--json",
                "--intent",
                intent,
                "--code",
                CODE.replace("FILE", name),
                "--tool",
                "read_file",
                "--tool",
                "parse_json",
            )
            assert done.returncode == 0, done.stderr
        answer = cli("suggest", "--json", "Load a JSON file")
        assert answer.returncode == 0, answer.stderr
        best = json.loads(answer.stdout)["suggestions"][0]
        assert best["pattern"]["tools_used"] == ["read_file", "parse_json"]
        assert "$PATH" in best["pattern"]["template"]
        # a request in French: the cross-lingual companion (USE read through the bridge shipped
        # in the wheel), from the installed package alone
        answer = cli("suggest", "--json", "Charger un fichier JSON")
        assert answer.returncode == 0, answer.stderr
        best = json.loads(answer.stdout)["suggestions"][0]
        assert best["pattern"]["tools_used"] == ["read_file", "parse_json"]
    finally:
        stop_pml_serve(proc)
