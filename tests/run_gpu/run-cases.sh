#!/usr/bin/env bash
# GPU proof of `streamsan run` (run on the GPU machine from the project root, with the
# binaries carried in .run-bundle/: streamsan and libstreamsan_tool.so, built by
# tests/run_gpu/bundle.sh). Builds tests/run_gpu/apps/cases.cu with nvcc, then for every case:
# the plain program's numbers (racy: WRONG, fixed: right), and the verdict and exit status of
# `streamsan run` (racy: 66 with races, fixed: 0 and none), with the JSON reports and traces
# in $OUT. Then PyTorch scripts under `streamsan run`, to compare with the PyTorch front end.
#   STAGES: any of cases live api torch programs cudarc bench (default: cases api torch bench)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=$(mktemp -d); B=$PWD/.run-bundle
STAGES=${STAGES:-cases api torch bench}
CUDA=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
export STREAMSAN_TOOL_LIB=$B/libstreamsan_tool.so
log=$OUT/run-gpu.log; : > "$log"
say() { echo "$*" | tee -a "$log"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
"$CUDA/bin/nvcc" -O2 -g -lineinfo -arch=sm_90 tests/run_gpu/apps/cases.cu -o $W/cases -lpthread 2>&1 | tail -3
CASES="cross_stream event_sync stream_query legacy copy_after_kernel copy_copy memset_after_read async_alloc graph record_before per_thread atomics destroyed"
mkdir -p $W/traces
verdict() {  # name variant expected_exit json
  local rc=$1 want=$2 json=$3
  local races; races=$(python3 -c "import json,sys; print(json.load(open('$json'))['summary']['races'])" 2>/dev/null || echo "?")
  if [ "$rc" = "$want" ]; then echo "ok (exit $rc, races $races)"; else echo "MISMATCH (exit $rc, want $want, races $races)"; fi
}
if [[ " $STAGES " == *" cases "* ]]; then
  say "== cases: plain numbers, then streamsan run (instrumented)"
  for c in ${ONLY_CASES:-$CASES halves}; do
    for v in racy fixed; do
      [ "$c" = halves ] && [ "$v" = racy ] && continue
      plain=$($W/cases $c $v 2>&1 | tail -1)
      t0=$(date +%s.%N)
      timeout 300 $B/streamsan run --format json --report $W/$c-$v.json --keep-traces $W/traces/$c-$v -- $W/cases $c $v > $W/$c-$v.out 2> $W/$c-$v.err
      rc=$?; t1=$(date +%s.%N)
      want=0; [ $v = racy ] && want=66
      say "$c $v | plain: $plain | run: $(verdict $rc $want $W/$c-$v.json) | $(python3 -c "print(f'{$t1-$t0:.1f} s')")"
    done
  done
  for v in racy fixed; do
    say "destroyed $v: stream_destroy records in the trace: $(cat $W/traces/destroyed-$v/trace-*.jsonl 2>/dev/null | grep -c '"op":"stream_destroy"')"
  done
  say "-- text report of cross_stream racy:"
  $B/streamsan check $W/traces/cross_stream-racy/trace-*.jsonl 2>&1 | head -40 | tee -a "$log"
  say "-- stderr of cross_stream racy:"; cat $W/cross_stream-racy.err | tee -a "$log"
fi
if [[ " $STAGES " == *" live "* ]]; then
  say "== checked as the program runs: races on stderr as found, --halt-on-error"
  for v in racy fixed; do
    $B/streamsan run -- $W/cases cross_stream $v > $W/live-$v.out 2> $W/live-$v.err; rc=$?
    say "live cross_stream $v | exit $rc | stdout: $(tail -1 $W/live-$v.out) | stderr RACE blocks: $(grep -c '^RACE' $W/live-$v.err) | $(grep '^SUMMARY' $W/live-$v.err)"
    $B/streamsan run --halt-on-error -- $W/cases cross_stream $v > $W/halt-$v.out 2> $W/halt-$v.err; rc=$?
    say "halt cross_stream $v | exit $rc | stdout lines: $(wc -l < $W/halt-$v.out) ($(tail -1 $W/halt-$v.out)) | halted: $(grep -c 'halting the program' $W/halt-$v.err)"
  done
  # The program sends its stderr elsewhere: the races print there as found, and the report
  # at the end (on streamsan's stderr) is whole.
  $B/streamsan run -- sh -c "$W/cases cross_stream racy 2> $W/redirected.err" > /dev/null 2> $W/live-redirect.err; rc=$?
  say "live redirected | exit $rc | RACE blocks: program's stderr $(grep -c '^RACE' $W/redirected.err), streamsan's $(grep -c '^RACE' $W/live-redirect.err)"
  say "-- stderr of the live racy run:"; cat $W/live-racy.err | tee -a "$log"
  say "-- stderr of the halted racy run:"; cat $W/halt-racy.err | tee -a "$log"
fi
if [[ " $STAGES " == *" api "* ]]; then
  say "== --api-only"
  # Kernels unchecked: a race in which a kernel takes part is not found (cross_stream), a race
  # between copies is.
  for c in copy_copy cross_stream; do
    for v in racy fixed; do
      timeout 300 $B/streamsan run --api-only --format json --report $W/api-$c-$v.json -- $W/cases $c $v > $W/api-$c-$v.out 2> $W/api-$c-$v.err
      rc=$?; want=0; [ $v = racy ] && [ $c = copy_copy ] && want=66
      say "api-only $c $v | $(verdict $rc $want $W/api-$c-$v.json)"
    done
  done
fi
if [[ " $STAGES " == *" torch "* ]]; then
  say "== PyTorch scripts under streamsan run (expected: the PyTorch front end's verdicts)"
  for f in ${TORCH_CASES:-r01_default_stream r02_event_between_streams r03_allocator_reuse r04_pinned_d2h_read r06_overlapping_views r08_cuda_graph_replay r09_event_query_poll r11_custom_op_mutates r12_stream_query_poll}; do
    for v in racy fixed; do
      t0=$(date +%s.%N)
      timeout 300 $B/streamsan run --format json --report $W/torch-$f-$v.json --keep-traces $W/traces/torch-$f-$v -- $PY tests/torch_gpu/cases/${f}_$v.py > $W/torch-$f-$v.out 2> $W/torch-$f-$v.err
      rc=$?; t1=$(date +%s.%N)
      want=0; [ $v = racy ] && want=66
      say "torch $f $v | $(grep -h RESULT $W/torch-$f-$v.out 2>/dev/null | head -1) | $(verdict $rc $want $W/torch-$f-$v.json) | $(python3 -c "print(f'{$t1-$t0:.1f} s')")"
      tail -3 $W/torch-$f-$v.err >> "$log"
    done
  done
fi
if [[ " $STAGES " == *" programs "* ]]; then
  say "== correct PyTorch programs (tests/torch_gpu/programs) under streamsan run: expected clean"
  for f in tests/torch_gpu/programs/*.py; do
    n=$(basename $f .py)
    t0=$(date +%s.%N)
    timeout 240 $B/streamsan run --report $W/prog-$n.txt --keep-traces $W/traces/prog-$n -- $PY $f > $W/prog-$n.out 2> $W/prog-$n.err
    rc=$?; t1=$(date +%s.%N)
    say "program $n | $(verdict $rc 0 /dev/null) | $(grep SUMMARY $W/prog-$n.txt | head -1) | $(python3 -c "print(f'{$t1-$t0:.1f} s')")"
    grep -E "^RACE|^  (read|write|previous|why)" $W/prog-$n.txt 2>/dev/null | head -12 | cut -c1-400 >> "$log"
    grep "not-checked" $W/prog-$n.txt | head -9 >> "$log"
  done
fi
if [[ " $STAGES " == *" cudarc "* ]]; then
  # cudarc 0.19.10's own examples as cudarc ships them (not ported: tests/cudarc_programs.rs
  # builds both; carry target/cudarc-programs/bin and .../examples): correct programs we did
  # not write, through the driver API. Expected: the program's own exit status, no race.
  say "== cudarc's examples, unmodified, under streamsan run"
  for p in target/cudarc-programs/bin/cudarc_*; do
    n=$(basename $p)
    ( cd target/cudarc-programs && timeout 120 $B/streamsan run --report $W/$n.txt -- bin/$n > $W/$n.out 2> $W/$n.err )
    rc=$?
    ( cd target/cudarc-programs && timeout 60 bin/$n > /dev/null 2>&1 ); plain=$?
    say "cudarc $n | plain exit $plain | run exit $rc | $(grep SUMMARY $W/$n.txt 2>/dev/null | head -1)"
    grep -E "^RACE|^  (read|write|previous|why)|tool error" $W/$n.txt $W/$n.err 2>/dev/null | head -8 | cut -c1-300 >> "$log"
  done
fi
if [[ " $STAGES " == *" bench "* ]]; then
  say "== cost per launch (bench N ITERS: two streams joined by events; median of 3 runs each)"
  "$CUDA/bin/nvcc" -O2 -arch=sm_90 tests/run_gpu/apps/bench.cu -o $W/bench 2>&1 | tail -3
  CS="$CUDA/bin/compute-sanitizer"; [ -x "$CS" ] || CS="$CUDA/compute-sanitizer/compute-sanitizer"
  sizes=("4096 2000" "1048576 200"); [ -n "${BENCH_SIZE:-}" ] && sizes=("$BENCH_SIZE")
  for size in "${sizes[@]}"; do
    for mode in ${BENCH_MODES:-plain api-only api-only-no-sites streamsan memcheck racecheck}; do
      vals=""
      for rep in 1 2 3; do
        case $mode in
          plain) cmd="$W/bench $size" ;;
          api-only) cmd="$B/streamsan run --api-only -- $W/bench $size" ;;
          api-only-no-sites) cmd="$B/streamsan run --api-only --no-call-sites -- $W/bench $size" ;;
          streamsan) cmd="$B/streamsan run -- $W/bench $size" ;;
          streamsan-log1) cmd="$B/streamsan run --log-entries 1 -- $W/bench $size" ;;
          # Another build of the tool beside this one (BENCH_OLD_TOOL), for before/after.
          streamsan-old) cmd="env STREAMSAN_TOOL_LIB=${BENCH_OLD_TOOL:-$B/old_tool.so} $B/streamsan run -- $W/bench $size" ;;
          memcheck) cmd="$CS --tool memcheck $W/bench $size" ;;
          racecheck) cmd="$CS --tool racecheck $W/bench $size" ;;
        esac
        t0=$(date +%s.%N); v=$($cmd 2>/dev/null | grep -o 'us_per_launch=[0-9.]*' | cut -d= -f2); t1=$(date +%s.%N)
        vals="$vals $v/$(python3 -c "print(f'{$t1-$t0:.2f}')")"
      done
      say "bench $size $mode | us_per_launch/total_s:$vals"
    done
  done
fi
tar czf $OUT/run-results.tar.gz -C $W --exclude=cases . 2>/dev/null
ls -la $OUT
