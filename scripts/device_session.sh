#!/usr/bin/env bash
# A GPU session's steps in one call, logs under $OUT (or ./device-out):
#   bash scripts/device_session.sh STEP [STEP ...]
# Steps: build (install + opus extension), smoke (scripts/wgmma_probe.cu, scripts/i8_smoke.py), tests (pytest -m gpu with
# PYTEST_ARGS), peer (DeepGEMM built from .peers/ -- the peers' source release copied into the
# checkout -- then scripts/peer_compare.py with PEER_ARGS), bench (the bench CLI with BENCH_ARGS).
# DeepGEMM builds in the background from the first step on when "peer" is asked for.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/xdg-cache}
export PYTHONUNBUFFERED=1 DG_JIT_CACHE_DIR=/tmp/dgjit
unset TRITON_INTERPRET
rc=0
step() { echo "== $1 ($(date +%T))"; }
if [[ " $* " == *" peer "* && -d .peers ]]; then
  (bash .peers/build_deepgemm.sh .peers /tmp/dg_site >"$out/deepgemm_build.log" 2>&1; echo $? >/tmp/dg_rc) &
fi
for s in "$@"; do
  case $s in
    build)
      step build
      python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.log" 2>&1 || { cat "$out/pip.log"; exit 1; }
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
      ( time python3 -m mqa_logits_mxfp4 build --verbose ) >"$out/opus_build.log" 2>&1
      r=$?; echo "opus build rc=$r"; tail -4 "$out/opus_build.log"; rc=$((rc | r)) ;;
    smoke)
      step smoke
      nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mqa_logits_mxfp4/backends/opus/csrc \
        scripts/wgmma_probe.cu -o /tmp/wgmma_probe && timeout 30 /tmp/wgmma_probe | tee "$out/wgmma_probe.log"
      timeout ${SMOKE_TIMEOUT:-90} python3 scripts/i8_smoke.py 2>&1 | tee "$out/smoke.log" | tail -40
      r=${PIPESTATUS[0]}; rc=$((rc | r)); [[ $r == 0 ]] || { echo "smoke failed: later steps skipped"; exit $rc; } ;;
    tests)
      step tests
      timeout ${TEST_TIMEOUT:-420} python3 -m pytest -m gpu -q -n "${WORKERS:-8}" -p no:cacheprovider --timeout 60 ${PYTEST_ARGS:-} \
        2>&1 | tee "$out/pytest_gpu.log" | tail -30; rc=$((rc | PIPESTATUS[0])) ;;
    peer)
      step peer
      wait
      echo "deepgemm build rc=$(cat /tmp/dg_rc 2>/dev/null)"; tail -2 "$out/deepgemm_build.log"
      PYTHONPATH=/tmp/dg_site:${PYTHONPATH:-} timeout ${PEER_TIMEOUT:-300} python3 scripts/peer_compare.py \
        --csv "$out/peer.csv" ${PEER_ARGS:-} 2>&1 | tee "$out/peer.log" | tail -60; rc=$((rc | PIPESTATUS[0])) ;;
    bench)
      step bench
      PYTHONPATH=/tmp/dg_site:${PYTHONPATH:-} python3 -m mqa_logits_mxfp4 bench ${BENCH_ARGS:---suite deepseek_v4 --quick} \
        --csv "$out/bench.csv" --png "$out/bench.png" 2>&1 | tee "$out/bench.log" | tail -40; rc=$((rc | PIPESTATUS[0])) ;;
    *) echo "unknown step $s"; rc=2 ;;
  esac
done
echo "== done ($(date +%T)) rc=$rc"
exit $rc
