#!/usr/bin/env bash
# Sanity of the CSAN replay (benches/csan/README.md): CSAN must report the race of a small racy
# corpus trace, and none on its fixed twin nor on the race-free synthetic workload.
#   bash benches/csan/sanity.sh [PYTHON] [SYNTHETIC_TRACE]
# PYTHON: an interpreter with torch installed (default python3). SYNTHETIC_TRACE: a file written
# by `cargo bench --bench throughput -- --write PATH N` (skipped when not given).
set -u
py=${1:-python3}
synth=${2:-}
cd "$(dirname "$0")/../.."
fail=0
expect() {  # expect STATUS TRACE: replay.py's exit status is 1 when CSAN reports a race
    "$py" benches/csan/replay.py "$2" --repeats 1 2>/dev/null | tail -1
    local rc=${PIPESTATUS[0]}
    if [ "$rc" = "$1" ]; then echo "ok: $2"; else echo "FAILED: $2 (exit $rc, expected $1)"; fail=1; fi
}
# r11-raw: `consume` on stream 2 reads x (line 8) after `produce` wrote it on stream 1 (line 7),
# with no event between them; the fixed twin records an event on 1 and waits for it on 2.
expect 1 tests/corpus/r11-raw.racy.jsonl
expect 0 tests/corpus/r11-raw.fixed.jsonl
[ -n "$synth" ] && expect 0 "$synth"
exit $fail
