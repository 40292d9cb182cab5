#!/usr/bin/env bash
# benchmarks/speed/gpu_session.py on a lent CUDA machine, and its preparation on this one.
#
#   bash benchmarks/speed/gpu_session.sh prepare   # here, once: fills the git-ignored .gpu_carry/
#   bash benchmarks/speed/gpu_session.sh [ARGS]    # there: the session, ARGS passed to benchmarks.speed.gpu_session
#   GPU_SESSION_BUDGET_S=120 bash benchmarks/speed/gpu_session.sh --stages mod_ratios   # one stage again
#
# The `run` tool's call: command "bash benchmarks/speed/gpu_session.sh", carry [".gpu_carry"], timeout_s 600.
# .gpu_carry/ holds what the machine's image lacks (it has torch and Triton, no network):
#   whl/    wheels of pydantic, pydantic-core (cp312), annotated-types, typing-inspection and
#           typing-extensions at this venv's versions, installed there into /tmp/site;
#   cache/  the tokenised shipped corpus (RESNAS_CACHE): building it needs `datasets`.
# Output: $OUT/gpu_session.json (rewritten after every stage) and $OUT/gpu_session.log.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu_carry

if [[ "${1:-}" == prepare ]]; then
  PY=${PYTHON:-.venv/bin/python}
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")" "$CARRY/whl"
  grep -qxF "/$CARRY/" "$exclude" 2>/dev/null || echo "/$CARRY/" >>"$exclude"
  pins=$("$PY" -c 'import importlib.metadata as m
print(" ".join(f"{n}=={m.version(n)}" for n in
      ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")))') || exit 1
  # shellcheck disable=SC2086  # one argument per pin
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$CARRY/whl" $pins || exit 1
  RESNAS_CACHE="$CARRY/cache" "$PY" -c 'from workers import DataConfig, load_corpus; print(load_corpus(DataConfig()).name)' \
    || exit 1
  rm -rf "$CARRY/cache/hf-datasets"  # the datasets cache of the build: not needed to read the corpus
  du -sh "$CARRY" && ls "$CARRY/whl"
  exit 0
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import pydantic' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$CARRY"/whl/*.whl || { echo "gpu_session.sh: no wheels in $CARRY/whl: run 'prepare' here first" >&2; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[[ -d $CARRY/cache ]] && export RESNAS_CACHE="$PWD/$CARRY/cache"
unset TRITON_INTERPRET  # the compiled kernels, not the interpreter
dir=${OUT:-benchmarks/results}
mkdir -p "$dir"
budget=${GPU_SESSION_BUDGET_S:-480}  # whole seconds; e.g. GPU_SESSION_BUDGET_S=120 ... --stages mod_ratios
# the script's own budget covers its stages; the margin covers imports and a last stage's overrun
timeout -k 10 $((budget + 70)) "$PY" -m benchmarks.speed.gpu_session --budget-s "$budget" \
  --out "$dir/gpu_session.json" "$@" 2>&1 | tee "$dir/gpu_session.log"
exit "${PIPESTATUS[0]}"
