#!/bin/bash
# Builds the timing driver into DIR on the machine whose driver it fronts: a trampoline for
# every function the real libcuda.so.1 exports, but the three timed in timed.c. Needs gcc, nm.
#
#     bash benches/driver-timing/build.sh DIR        # DRIVER_TIMING_REAL=/path/libcuda.so.1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build.sh DIR (where to put the timing libcuda.so)}
real=${DRIVER_TIMING_REAL:-/usr/local/nvidia/lib64/libcuda.so.1}
mkdir -p "$dir"
nm -D --defined-only "$real" | awk '$2 == "T" || $2 == "W" { print $3 }' | sed 's/@.*//' | sort -u |
  grep -vx -e cuLaunchKernel -e cuEventRecord -e cuStreamWaitEvent > "$dir/symbols"
n=$(wc -l < "$dir/symbols")
{
  echo '.data'
  echo '.balign 8'
  echo '.globl shim_ptrs'; echo '.hidden shim_ptrs'; echo 'shim_ptrs:'; echo "  .zero $((8 * n))"
  echo '.balign 4'
  echo '.globl shim_count'; echo '.hidden shim_count'; echo "shim_count: .long $n"
  echo '.section .rodata'
  awk '{ printf "name_%d: .asciz \"%s\"\n", NR - 1, $1 }' "$dir/symbols"
  echo '.data'
  echo '.balign 8'
  echo '.globl shim_names'; echo '.hidden shim_names'; echo 'shim_names:'
  awk '{ printf "  .quad name_%d\n", NR - 1 }' "$dir/symbols"
  echo '.text'
  awk '{ printf ".globl %s\n.type %s,@function\n%s: jmp *shim_ptrs+%d(%%rip)\n", $1, $1, $1, 8 * (NR - 1) }' "$dir/symbols"
  echo '.section .note.GNU-stack,"",@progbits'
} > "$dir/trampolines.s"
gcc -O2 -shared -fPIC -o "$dir/libcuda.so.1" "$here/timed.c" "$dir/trampolines.s" -ldl
ln -sf libcuda.so.1 "$dir/libcuda.so"
echo "driver-timing: $dir/libcuda.so.1 in front of $real ($n functions passed through, 3 timed)"
