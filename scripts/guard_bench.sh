#!/usr/bin/env bash
# What the device-side guards cost (docs/contract.md, "Memory safety"): the bench on the tree before
# them and on this one, alternating (before, after, before, after) in one session, then every
# candidate's best time side by side. Logs and CSVs go to $OUT (or ./device-out).
# Usage: BASE=/path/to/tree-before bash scripts/guard_bench.sh
#    or: BASE_REF=<commit before the guards> bash scripts/guard_bench.sh   (in a git checkout)
# BENCH_ARGS replaces the selection (default: --suite deepseek_v4 --quick, triton and opus).
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/xdg-cache}
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
base=${BASE:-}
if [[ -z $base ]]; then
  base=/tmp/guard-base
  rm -rf "$base" && mkdir -p "$base"
  git archive "${BASE_REF:?set BASE (a tree of the commit before the guards) or BASE_REF}" | tar -x -C "$base" || exit 2
fi
args=(${BENCH_ARGS:---suite deepseek_v4 --quick --backend triton --backend opus})
rc=0
for round in 1 2; do
  for tag in before after; do
    tree=$([[ $tag == before ]] && echo "$base" || echo "$PWD")
    # from inside the tree: `python -m` puts the working directory first on sys.path
    (cd "$tree" && PYTHONPATH=$tree python3 -c "import mqa_logits_mxfp4 as m; print('package', m.__file__)" &&
      PYTHONPATH=$tree python3 -m mqa_logits_mxfp4 bench "${args[@]}" --no-torch-path \
      --csv "$out/guard-$tag-$round.csv") >"$out/guard-$tag-$round.log" 2>&1
    r=$?; echo "bench $tag, round $round: rc=$r"; rc=$((rc | r))
  done
done
python3 - "$out" <<'EOF'
import sys
import pandas as pd
out = sys.argv[1]
key = ["shape", "backend", "instance", "mode"]
best = {}
for tag in ("before", "after"):
    runs = [pd.read_csv(f"{out}/guard-{tag}-{r}.csv") for r in (1, 2)]
    t = pd.concat(runs)
    best[tag] = t[t.status == "ok"].groupby(key)["us"].min()
side = pd.concat(best, axis=1).dropna()
side["after/before"] = side["after"] / side["before"]
pd.set_option("display.width", 200)
print(side.sort_values("after/before").to_string(float_format=lambda v: f"{v:.3f}"))
print(f"\n{len(side)} candidates: after/before median {side['after/before'].median():.3f}, "
      f"max {side['after/before'].max():.3f}")
side.to_csv(f"{out}/guard-side-by-side.csv")
EOF
exit $rc
