#!/usr/bin/env bash
# GPU proof runs of streamsan's PyTorch front end (README.md beside this file).
#
#   tests/torch_gpu/run.sh [CASE...]
#
# CASE: a rule prefix (r03), a rule (r03_allocator_reuse) or one program (r03_allocator_reuse_racy);
# default: every program in cases/. For each program: PLAIN_RUNS plain runs (their RESULT lines),
# one run under `python -m streamsan.torch --format json --report FILE` (exit status, JSON
# report), one under PyTorch's CSAN (TORCH_CUDA_SANITIZER=1: did it flag a race). Then
# verdicts.py writes $OUT/torch_gpu/verdicts.md (the table), verdicts.json (everything, the
# streamsan JSON reports included) and results.tar.gz (every log and report).
#
# Exit status: 0 when every streamsan verdict matches the expectation (racy: races >= 1 and exit
# 66; fixed: no race and exit 0) and every plain run of a fixed program printed RESULT ok; 1
# otherwise; 2 when the setup is unusable (no CUDA device, no cases matched).
#
# Environment:
#   PYTHON        interpreter with torch and streamsan (default: python)
#   OUT           results go to $OUT/torch_gpu (default: /tmp/streamsan-torch-gpu)
#   PLAIN_RUNS    plain runs per program (default 3)
#   JOBS          programs run at a time (default 4; 1 for a strictly serial run)
#   CASE_TIMEOUT  seconds allowed to each run (default 180)
#   SKIP_CSAN=1   leave out the CSAN runs
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python}
PLAIN_RUNS=${PLAIN_RUNS:-3}
JOBS=${JOBS:-4}
CASE_TIMEOUT=${CASE_TIMEOUT:-180}
SKIP_CSAN=${SKIP_CSAN:-}
outdir=${OUT:-/tmp/streamsan-torch-gpu}/torch_gpu
work=$(mktemp -d "${TMPDIR:-/tmp}/torch_gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$outdir"
export PYTHONUNBUFFERED=1

# The programs to run.
progs=()
for f in "$here"/cases/r*_racy.py "$here"/cases/r*_fixed.py; do
    name=$(basename "$f" .py)
    if [ $# -eq 0 ]; then
        progs+=("$name")
    else
        for want in "$@"; do
            case $name in "$want" | "$want"_*) progs+=("$name"); break ;; esac
        done
    fi
done
if [ ${#progs[@]} -eq 0 ]; then
    echo "run.sh: no case matches: $*" >&2
    exit 2
fi
mapfile -t progs < <(printf '%s\n' "${progs[@]}" | sort)

# The machine, for the table's heading; no CUDA device means nothing here can prove anything.
"$PYTHON" - >"$work/env.txt" 2>&1 <<'EOF'
import platform, sys
import torch
print(f"python {platform.python_version()} ({sys.executable})")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
print(f"device {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
print(f"devices {torch.cuda.device_count()}")
try:
    from importlib.metadata import version
    print(f"streamsan {version('streamsan')}")
except Exception as e:  # reported, not fatal: the streamsan runs will show what is wrong
    print(f"streamsan version unknown: {e!r}")
try:
    import streamsan.torch  # noqa: F401
    print("streamsan.torch imports")
except Exception as e:
    print(f"streamsan.torch does not import: {e!r}")
EOF
env_rc=$?
cat "$work/env.txt"
if [ $env_rc -ne 0 ] || grep -q '^device none' "$work/env.txt"; then
    echo "run.sh: $PYTHON cannot use a CUDA device (see above); nothing to prove here" >&2
    exit 2
fi

# Programs that need two GPUs (r13) are left out on a machine with one.
if [ "$(sed -n 's/^devices //p' "$work/env.txt")" -lt 2 ] 2>/dev/null; then
    kept=()
    for name in "${progs[@]}"; do
        case $name in r13_*) echo "run.sh: $name needs two GPUs; left out" >&2 ;; *) kept+=("$name") ;; esac
    done
    progs=("${kept[@]}")
    [ ${#progs[@]} -gt 0 ] || { echo "run.sh: nothing left to run on one GPU" >&2; exit 2; }
fi

now() { date +%s.%N; }

# run_one NAME: every run of one program; each leaves NAME.<run>.log, .rc and .time (start and
# end, in seconds) in $work.
run_one() {
    local name=$1 prog="$here/cases/$1.py" i t0
    for ((i = 1; i <= PLAIN_RUNS; i++)); do
        t0=$(now)
        timeout "$CASE_TIMEOUT" "$PYTHON" "$prog" >"$work/$name.plain$i.log" 2>&1
        echo $? >"$work/$name.plain$i.rc"
        echo "$t0 $(now)" >"$work/$name.plain$i.time"
    done
    t0=$(now)
    timeout "$CASE_TIMEOUT" "$PYTHON" -m streamsan.torch --format json \
        --report "$work/$name.streamsan.json" "$prog" >"$work/$name.streamsan.log" 2>&1
    echo $? >"$work/$name.streamsan.rc"
    echo "$t0 $(now)" >"$work/$name.streamsan.time"
    if [ -z "$SKIP_CSAN" ]; then
        t0=$(now)
        TORCH_CUDA_SANITIZER=1 timeout "$CASE_TIMEOUT" "$PYTHON" "$prog" \
            >"$work/$name.csan.log" 2>&1
        echo $? >"$work/$name.csan.rc"
        echo "$t0 $(now)" >"$work/$name.csan.time"
    fi
    echo "done: $name (streamsan exit $(cat "$work/$name.streamsan.rc"))"
}

echo "running ${#progs[@]} programs, $JOBS at a time, work files in $work"
running=0
for name in "${progs[@]}"; do
    if [ "$running" -ge "$JOBS" ]; then
        wait -n
        running=$((running - 1))
    fi
    run_one "$name" &
    running=$((running + 1))
done
wait

"$PYTHON" "$here/verdicts.py" "$work" "$outdir" "${progs[@]}"
status=$?
tar -czf "$outdir/results.tar.gz" -C "$work" .
echo "verdicts: $outdir/verdicts.md; logs and reports: $outdir/results.tar.gz"
exit $status
