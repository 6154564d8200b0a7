#!/usr/bin/env bash
# Nsight Compute on one shape for each candidate given (after scripts/device_check.sh installed
# the package and built opus): the sections that say what bounds a kernel (speed of light,
# occupancy, warp stalls, issue slots, instruction mix, memory, stall sampling by SASS line).
# Usage: bash scripts/device_profile.sh SUITE "SHAPE" backend/instance/mode [...]   -> $OUT/ncu-<instance>.txt
# NCU_PAGE=raw prints every metric the sections collect (the stall reasons among them) instead.
# NCU_SASS=1 also keeps each candidate's stall samples by SASS line: $OUT/sass-<instance>.csv (the
# source page) and its summary by barrier segment, loop and line, $OUT/sass-<instance>.txt
# (scripts/ncu_sass.py).
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # scripts/profile_case.py imports the package from the tree
unset TRITON_INTERPRET
suite=$1 shape=$2; shift 2
rc=0
for cand in "$@"; do
  inst=$(cut -d/ -f2 <<<"$cand")
  ncu --clock-control none -k regex:mqa_logits --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section InstructionStats --section SourceCounters --page "${NCU_PAGE:-details}" \
      python3 scripts/profile_case.py "$suite" "$shape" "$cand" >"$out/ncu-$inst.txt" 2>&1
  s=$?; rc=$((rc | s)); echo "ncu $cand: rc=$s, $(wc -l <"$out/ncu-$inst.txt") lines"
  if [[ ${NCU_SASS:-0} == 1 ]]; then
    ncu --clock-control none -k regex:mqa_logits --launch-skip 2 --launch-count 1 --section SourceCounters \
        --section WarpStateStats --import-source no -f -o "/tmp/sass-$inst" \
        python3 scripts/profile_case.py "$suite" "$shape" "$cand" >/dev/null 2>&1 &&
      ncu --import "/tmp/sass-$inst.ncu-rep" --page source --print-source sass --csv >"$out/sass-$inst.csv" &&
      python3 scripts/ncu_sass.py "$out/sass-$inst.csv" >"$out/sass-$inst.txt"
    s=$?; rc=$((rc | s)); echo "ncu sass $cand: rc=$s"
  fi
done
exit $rc
