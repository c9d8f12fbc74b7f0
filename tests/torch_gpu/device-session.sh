#!/usr/bin/env bash
# One device session for the PyTorch front end, run from the repository root on the GPU
# machine (which has torch but no network and no Rust): installs the wheels carried in .whl/
# (streamsan, built here with maturin, and pytest), then runs the GPU-only Python tests, the
# racy/fixed programs (run.sh), records example traces for tests/fixtures/torch
# (torch_traces.tar.gz), runs the correct programs of tests/torch_gpu/programs (programs.tar.gz)
# and the cost benchmark. Everything lands under $OUT.
#
#   bash tests/torch_gpu/device-session.sh [tests|cases|traces|programs|bench]...
#   (default: all five; CASES="r03 r08" limits the cases step to those rules)
set -u
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/streamsan-device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
site=/tmp/streamsan-site
rm -rf "$site"
"$PY" -m pip install -q --no-index --no-deps --target "$site" .whl/*.whl || exit 2
export PYTHONPATH=$site
steps=${*:-tests cases traces programs bench}
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c 'import torch, streamsan._native as n; print("torch", torch.__version__, "streamsan", n.__version__)' | tee -a "$OUT/gpu.txt"
for step in $steps; do
    echo "=== $step"
    case $step in
    tests)
        "$PY" -m pytest -q -p no:cacheprovider python/tests/test_cuda.py 2>&1 | tee "$OUT/pytest_cuda.txt" | tail -15
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
    cases)
        # CASES: run.sh's case filters (default: all 24 programs).
        PYTHON=$PY OUT=$OUT bash tests/torch_gpu/run.sh ${CASES:-} || status=1
        cat "$OUT/torch_gpu/verdicts.md" ;;
    traces)
        # One archive: the device tool brings back only a few files per call.
        dir=$(mktemp -d)
        for c in r01_default_stream r03_allocator_reuse r08_cuda_graph_replay r04_pinned_d2h_read; do
            for twin in racy fixed; do
                "$PY" -m streamsan.torch --trace "$dir/${c}_$twin.jsonl" --report "$dir/${c}_$twin.txt" \
                    "tests/torch_gpu/cases/${c}_$twin.py" > /dev/null
                echo "${c}_$twin: exit $?"
            done
        done
        tar czf "$OUT/torch_traces.tar.gz" -C "$dir" . ;;
    programs)
        # Correct programs written the way people write them: each must compute the right
        # result plainly and under streamsan, with no race, no warning and exit 0.
        mkdir -p "$OUT/programs"
        for f in tests/torch_gpu/programs/*.py; do
            c=$(basename "$f" .py)
            plain=$("$PY" "$f" 2>&1 | grep '^RESULT')
            "$PY" -m streamsan.torch --format json --report "$OUT/programs/$c.json" \
                --trace "$OUT/programs/$c.jsonl" "$f" > "$OUT/programs/$c.out" 2>&1
            rc=$?
            # What was recorded: records, host threads, operators (backward ones included).
            "$PY" - "$OUT/programs/$c.jsonl" <<'PYEOF'
import collections, json, sys
ops, threads, names = collections.Counter(), collections.Counter(), collections.Counter()
with open(sys.argv[1]) as f:
    next(f)
    for line in f:
        r = json.loads(line)
        ops[r["op"]] += 1
        threads[r.get("thread", 0)] += 1
        if r["op"] == "launch":
            names[r["name"]] += 1
backward = sum(n for k, n in names.items() if "backward" in k)
print(f"  records {sum(ops.values())}: {dict(ops)}; threads {dict(threads)}; {backward} backward launches")
PYEOF
            verdict=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(len(r["races"]), "races,", len(r["warnings"]), "warnings")' "$OUT/programs/$c.json" 2>&1)
            echo "$c: plain [$plain] streamsan [exit $rc, $verdict, $(grep '^RESULT' "$OUT/programs/$c.out")]"
            grep -q "internal error\|were not checked" "$OUT/programs/$c.out" && echo "  (see $c.out: not all was checked)"
            [ "$rc" -eq 0 ] && [ "$verdict" = "0 races, 0 warnings" ] || status=1
        done
        tar czf "$OUT/programs.tar.gz" -C "$OUT" programs && rm -rf "$OUT/programs" ;;
    bench)
        "$PY" benches/torch/overhead.py --out "$OUT/torch_bench.md" || status=1 ;;
    esac
done
exit $status
