#!/usr/bin/env bash
# The one prepared GPU check (README, "Development"; results in bench/RESULTS.md, "GPU"): CUDA parity
# tests, then the fused-path benchmark.
#   bench/gpu.sh            on a CUDA machine (python3 there must hold torch with CUDA)
#   bench/gpu.sh --dry-run  on a CPU machine: the same steps, small workloads, device=cpu
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/bench/out}; mkdir -p "$OUT"; export OUT
if [ "${1:-}" = "--dry-run" ]; then
  "$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/backends/test_parity.py tests/estimators/test_spec_vectors.py
  "$PY" -m bench.gpu_bench --device cpu --workloads a,b --repeats 3
  "$PY" -m bench.integrations_bench --sizes 8k --device cpu --repeats 1
  exit 0
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/backends/test_parity.py tests/estimators/test_spec_vectors.py 2>&1 | tee "$OUT/gpu_tests.log"
"$PY" -m bench.gpu_bench --device cuda --workloads b,c --repeats 20
# Trainer adapters on CUDA tensors (crbc fused on the device): parity, then cost per training step.
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/integrations/test_device_branches.py "tests/integrations/test_integrations.py::test_cuda_stays_on_device_and_matches_cpu" 2>&1 | tee "$OUT/gpu_integrations_tests.log"
"$PY" -m bench.integrations_bench --sizes 8k,256k --device cuda --repeats 10
