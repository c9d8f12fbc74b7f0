"""The side-stream prefetcher of NVIDIA's apex / many ImageNet training scripts, written
correctly: the next batch is copied on a side stream while the current one is used; the main
stream waits for the side stream before using a batch, and record_stream tells the caching
allocator that the main stream used it. streamsan must report nothing. Prints whether the sum
of all batches is right."""

import torch

dev = "cuda"
batches = [torch.full((1 << 16,), float(i)).pin_memory() for i in range(16)]


class Prefetcher:
    def __init__(self, host_batches):
        self.it = iter(host_batches)
        self.stream = torch.cuda.Stream()
        self.preload()

    def preload(self):
        try:
            host = next(self.it)
        except StopIteration:
            self.next = None
            return
        with torch.cuda.stream(self.stream):
            self.next = host.to(dev, non_blocking=True)
            self.next = self.next * 2.0  # some preprocessing on the side stream

    def get(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        batch = self.next
        if batch is not None:
            batch.record_stream(torch.cuda.current_stream())
        self.preload()
        return batch


total = torch.zeros((), device=dev)
p = Prefetcher(batches)
b = p.get()
while b is not None:
    total += b.sum()
    b = p.get()
expected = 2.0 * sum(range(16)) * (1 << 16)
got = total.item()
print(f"RESULT {'ok' if got == expected else 'WRONG'} expected={expected} got={got}")
