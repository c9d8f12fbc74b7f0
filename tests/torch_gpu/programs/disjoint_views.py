"""Disjoint parts of one tensor written on two streams with nothing ordering the streams, which
is correct because no byte is shared: the halves of chunk(2), interleaved strided views
x[::2] / x[1::2], and two column blocks of a matrix; then the default stream waits for both and
reads everything. Also index_add_ / scatter_ into separate tensors on the two streams. streamsan
must report nothing (it checks bytes, not tensors). Prints whether every value is right."""

import torch

dev = "cuda"
n = 1 << 12
x = torch.zeros(n, device=dev)
y = torch.zeros(n, device=dev)
m = torch.zeros(64, 64, device=dev)
a = torch.zeros(8, device=dev)
b = torch.zeros(8, device=dev)
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
for s in (s1, s2):
    s.wait_stream(torch.cuda.current_stream())
lo, hi = x.chunk(2)
with torch.cuda.stream(s1):
    lo.fill_(1.0)
    y[::2].fill_(3.0)
    m[:, :32].add_(5.0)
    a.index_add_(0, torch.arange(8, device=dev), torch.ones(8, device=dev))
with torch.cuda.stream(s2):
    hi.fill_(2.0)
    y[1::2].fill_(4.0)
    m[:, 32:].add_(6.0)
    b.scatter_(0, torch.arange(8, device=dev), torch.full((8,), 7.0, device=dev))
cur = torch.cuda.current_stream()
cur.wait_stream(s1)
cur.wait_stream(s2)
got = (x.sum().item(), y.sum().item(), m.sum().item(), a.sum().item(), b.sum().item())
want = (1.5 * n, 3.5 * n, 64 * 32 * 11.0, 8.0, 56.0)
print(f"RESULT {'ok' if got == want else 'WRONG'} got={got} want={want}")
