"""The prepared benchmark scripts run (dry runs on tiny inputs; figures live in bench/RESULTS.md)."""
import subprocess
import sys

from helpers import ROOT


def test_gpu_bench_cpu_dry_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_bench", "--device", "cpu", "--workloads", "a",
                           "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / "gpu_results.md").read_text()
    assert "| a | 368 | float64 |" in table and "| a | 368 | float32 |" in table


def test_gpu_script_is_one_prepared_command():
    text = (ROOT / "bench" / "gpu.sh").read_text()
    assert "tests/backends/test_parity.py" in text and "bench.gpu_bench --device cuda" in text
    assert "--dry-run" in text
