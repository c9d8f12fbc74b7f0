// spin: one thread busy-waits for `cycles` SM clock cycles (clock64). Enqueued ahead of a
// producer on its stream, it delays the producer by milliseconds, so a consumer on another
// stream that does not wait for it runs first every time: the race shows in the numbers, not
// only in the sanitizer's report. It touches no memory.
//
// clock64 counts the cycles of the SM the block runs on; at 1.5-2 GHz, 10^8 cycles is
// 50-70 ms (longer while the GPU clocks up from idle).

extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
