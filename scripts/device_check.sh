#!/usr/bin/env bash
# One call on a GPU machine: install, run the gpu-marked suite, then the benchmark.
# Usage: bash scripts/device_check.sh [tests|memcheck|host|bench|all]   (logs, CSV and PNG go to $OUT or ./device-out)
# BENCH_ARGS replaces the bench's default selection (--suite deepseek_v4 --quick), e.g.
#   BENCH_ARGS="--suite deepseek_v4 --suite deepseek_v4_1 --quick --best"
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/xdg-cache}
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
what=${1:-all}
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.log" 2>&1 || { cat "$out/pip.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
rc=0
# the opus extension, built once before any worker needs it (its log has the ptxas lines)
( time python3 -m mqa_logits_mxfp4 build --verbose ) >"$out/opus_build.log" 2>&1
echo "opus build: rc=$? ($(tail -4 "$out/opus_build.log" | tr '\n' ' '))"
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -m gpu -q -n "${WORKERS:-8}" -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$out/pytest_gpu.log" | tail -40
  rc=$((rc | ${PIPESTATUS[0]}))
fi
if [[ $what == memcheck || $what == all ]]; then
  # docs/contract.md "Memory safety": every bad-index case of tests/conformance/test_memory_safety.py,
  # one backend at a time, under compute-sanitizer memcheck. Without the caching allocator every
  # tensor is its own allocation, so an access past a tensor is one memcheck sees.
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for be in triton opus flydsl; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$sanitizer" --tool memcheck --error-exitcode 99 \
      --log-file "$out/memcheck-$be.log" python3 -m pytest -m gpu -q -p no:cacheprovider \
      tests/conformance/test_memory_safety.py -k "cuda-$be" ${PYTEST_ARGS:-} >"$out/pytest_memcheck-$be.log" 2>&1
    r=$?
    [[ $r == 5 ]] && { echo "memcheck $be: no case runs here"; continue; }   # pytest: all deselected
    echo "memcheck $be: rc=$r, $(tail -1 "$out/pytest_memcheck-$be.log"); $(grep -h 'ERROR SUMMARY' "$out/memcheck-$be.log" | tail -1)"
    rc=$((rc | r))
  done
fi
if [[ $what == host || $what == all ]]; then
  # the op's host cost over the raw launch, and the schedule build's device time (issue 6, target 5)
  python3 -m mqa_logits_mxfp4.tuning.host --json "$out/host.json" 2>&1 | tee "$out/host.log"
  rc=$((rc | ${PIPESTATUS[0]}))
fi
if [[ $what == bench || $what == all ]]; then
  # the package CLI's bench; the tuning module's own entry point until the CLI registers it
  bench=(python3 -m mqa_logits_mxfp4 bench)
  "${bench[@]}" --help >/dev/null 2>&1 || bench=(python3 -m mqa_logits_mxfp4.tuning.commands bench)
  "${bench[@]}" ${BENCH_ARGS:---suite deepseek_v4 --quick} --csv "$out/bench.csv" --png "$out/bench.png" \
    --log "$out/bench-candidates.jsonl" 2>&1 | tee "$out/bench.log"
  rc=$((rc | ${PIPESTATUS[0]}))
fi
exit $rc
