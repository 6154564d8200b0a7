#!/usr/bin/env bash
# One call on a GPU machine: install and build, then the steps asked for, in order.
# Usage: bash scripts/device_check.sh [STEP ...]   (default: all = tests memcheck host bench;
# logs, CSV and PNG go to $OUT or ./device-out). Steps:
#   smoke     scripts/wgmma_probe.cu and scripts/i8_smoke.py (seconds; a hang or a wrong layout
#             shows here, and the later steps are skipped when it fails)
#   tests     pytest -m gpu (PYTEST_ARGS, WORKERS, TEST_TIMEOUT)
#   memcheck  the bad-index cases under compute-sanitizer
#   host      the op's host cost
#   peer      DeepGEMM built from .peers/ (the peers' source release copied into the checkout; it
#             builds in the background from the start), then scripts/peer_compare.py (PEER_ARGS)
#   bench     the bench CLI; BENCH_ARGS replaces its default selection (--suite deepseek_v4
#             --quick), e.g. BENCH_ARGS="--suite deepseek_v4 --quick --best --peer deepgemm"
#             (DeepGEMM then builds in the background from the start, as for `peer`); BENCH_LOG
#             names where every candidate's JSON line goes (default /tmp: not returned)
#   tune      a model's table re-tuned on this card into $out/tune.csv (TUNE_ARGS; default the V4
#             quick suite, 100 ms a candidate, the two fastest re-timed), merged into the shipped
#             table on the CPU machine with `tune merge` (docs/tuning.md); with TUNE_CARD set (e.g.
#             H200: the shipped tables are that card's) any other card skips the step, rc 4 (asked
#             alone, before the install and the opus build)
#   ablations the run.sh of each folder in ABLATIONS (scripts/i8_ablations.py --out folders, carried;
#             their binaries are built on the CPU machine), each log to $out/<folder>.log and its
#             table printed (i8_ablations.py --summarize); asked alone, it skips the install and
#             the opus build (a minute of device time); NCU=1 then runs each folder's ncu.sh too (every
#             job and variant once in Nsight Compute: $out/ncu-<folder>.txt, with NCU_SASS=1 also
#             $out/sass-<folder>.txt)
# The install's and the builds' logs stay in /tmp unless they fail (the device tool returns at
# most 8 files); the opus build's ptxas lines are in /tmp/opus_build.log.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/xdg-cache}
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
steps=("$@"); [[ ${#steps[@]} == 0 || " ${steps[*]} " == *" all "* ]] && steps=(tests memcheck host bench)
export DG_JIT_CACHE_DIR=/tmp/dgjit
# DeepGEMM builds in the background for the peer step and for a bench asked for the peer column.
# The set-up's logs stay in /tmp (the device tool returns at most 8 files) unless a step fails.
peer_build=
if [[ ( " ${steps[*]} " == *" peer "* || ${BENCH_ARGS:-} == *--peer* ) && -d .peers ]]; then
  (bash .peers/build_deepgemm.sh .peers /tmp/dg_site >/tmp/deepgemm_build.log 2>&1; echo $? >/tmp/dg_rc) &
  peer_build=$!
fi
peer_ready() {  # the background DeepGEMM build finished (its log returned if the site fails to import)
  if [[ -n $peer_build ]]; then
    wait "$peer_build"; peer_build=
    # the build script's own last check imports from its source folder, whose deep_gemm/ (no _C)
    # shadows the built one: its rc can be 1 with a working site, so the import is the check
    local site
    site=$(cd /tmp && PYTHONPATH=/tmp/dg_site python3 -c 'import deep_gemm; print("ok", deep_gemm.__version__)' 2>&1 | tail -1)
    echo "deepgemm build rc=$(cat /tmp/dg_rc 2>/dev/null); import from the site: $site"
    [[ $site == ok* ]] || cp /tmp/deepgemm_build.log "$out/" 2>/dev/null
  fi
  return 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
wrong_card() { [[ -n ${TUNE_CARD:-} && $card != *"$TUNE_CARD"* ]]; }
# a tune on another card than TUNE_CARD asks stops before the install and the build
if [[ " ${steps[*]} " == " tune " ]] && wrong_card; then echo "tune: $card is not a $TUNE_CARD: skipped"; exit 4; fi
rc=0
# the package and the opus extension, built once before any worker needs them (the build's log has
# the ptxas lines); the harness blocks alone need neither (their binaries come built)
if [[ " ${steps[*]} " != " ablations " ]]; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  ( time python3 -m mqa_logits_mxfp4 build --verbose ) >/tmp/opus_build.log 2>&1
  r=$?; echo "opus build: rc=$r ($(tail -4 /tmp/opus_build.log | tr '\n' ' '))"
  [[ $r == 0 ]] || cp /tmp/opus_build.log "$out/"
fi
for what in "${steps[@]}"; do
  echo "== $what ($(date +%T))"
  case $what in
  smoke)
    nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mqa_logits_mxfp4/backends/opus/csrc \
      scripts/wgmma_probe.cu -o /tmp/wgmma_probe && timeout 30 /tmp/wgmma_probe | tee "$out/wgmma_probe.log"
    r=${PIPESTATUS[0]}
    timeout "${SMOKE_TIMEOUT:-90}" python3 scripts/i8_smoke.py 2>&1 | tee "$out/smoke.log" | tail -40
    r=$((r | PIPESTATUS[0])); rc=$((rc | r)); [[ $r == 0 ]] || { echo "smoke failed: later steps skipped"; exit $rc; } ;;
  tests)
    timeout "${TEST_TIMEOUT:-3000}" python3 -m pytest -m gpu -q -n "${WORKERS:-8}" -p no:cacheprovider ${PYTEST_ARGS:-} \
      2>&1 | tee "$out/pytest_gpu.log" | tail -40
    rc=$((rc | ${PIPESTATUS[0]})) ;;
  memcheck)
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
    done ;;
  host)
    # the op's host cost over the raw launch, and the schedule build's device time
    python3 -m mqa_logits_mxfp4.tuning.host --json "$out/host.json" 2>&1 | tee "$out/host.log"
    rc=$((rc | ${PIPESTATUS[0]})) ;;
  peer)
    peer_ready
    PYTHONPATH=/tmp/dg_site:${PYTHONPATH:-} timeout "${PEER_TIMEOUT:-600}" python3 scripts/peer_compare.py \
      --csv "$out/peer.csv" ${PEER_ARGS:-} 2>&1 | tee "$out/peer.log" | tail -60
    rc=$((rc | ${PIPESTATUS[0]})) ;;
  bench)
    peer_ready
    PYTHONPATH=/tmp/dg_site:${PYTHONPATH:-} python3 -m mqa_logits_mxfp4 bench ${BENCH_ARGS:---suite deepseek_v4 --quick} \
      --csv "$out/bench.csv" --png "$out/bench.png" --log "${BENCH_LOG:-/tmp/bench-candidates.jsonl}" 2>&1 | tee "$out/bench.log"
    rc=$((rc | ${PIPESTATUS[0]})) ;;
  tune)
    if wrong_card; then
      echo "tune: $card is not a $TUNE_CARD: skipped"; rc=$((rc | 4)); continue
    fi
    timeout "${TUNE_TIMEOUT:-420}" python3 -m mqa_logits_mxfp4 tune \
      ${TUNE_ARGS:---suite deepseek_v4 --quick --no-torch-path --budget-ms 100 --top 2} -o "$out/tune.csv" 2>&1 \
      | tee "$out/tune.log" | tail -20
    rc=$((rc | ${PIPESTATUS[0]})) ;;
  ablations)
    for dir in ${ABLATIONS:-}; do
      log="$out/$(basename "$dir").log"
      bash "$dir/run.sh" >"$log" 2>&1
      echo "ablations $dir: rc=$? (a timing-only variant's wrong cells give rc 3)"
      python3 scripts/i8_ablations.py --summarize "$log"
      if [[ ${NCU:-0} == 1 ]]; then OUT="$out" bash "$dir/ncu.sh"; echo "ncu $dir: rc=$?"; fi
    done ;;
  *) echo "unknown step $what"; rc=2 ;;
  esac
done
exit $rc
