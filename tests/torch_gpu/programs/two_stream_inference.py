"""Two models run concurrently on two side streams, each on inputs made on the default stream,
joined with events before the results are combined on the default stream; outputs copied to
pinned memory with non_blocking=True and read after an event synchronize. Correct: streamsan
must report nothing."""

import torch
import torch.nn as nn

torch.manual_seed(0)
dev = "cuda"
m1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).to(dev).eval()
m2 = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4)).to(dev).eval()
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
out_host = torch.empty(16, 4).pin_memory()
with torch.no_grad():
    for rep in range(5):
        img = torch.randn(16, 3, 32, 32, device=dev)
        vec = torch.randn(16, 32, device=dev)
        ready = torch.cuda.Event()
        ready.record()
        with torch.cuda.stream(s1):
            s1.wait_event(ready)
            a = m1(img)
            done1 = torch.cuda.Event()
            done1.record(s1)
        with torch.cuda.stream(s2):
            s2.wait_event(ready)
            b = m2(vec)
            done2 = torch.cuda.Event()
            done2.record(s2)
        torch.cuda.current_stream().wait_event(done1)
        torch.cuda.current_stream().wait_event(done2)
        a.record_stream(torch.cuda.current_stream())
        b.record_stream(torch.cuda.current_stream())
        img.record_stream(s1)
        vec.record_stream(s2)
        c = torch.softmax(a + b, dim=1)
        out_host.copy_(c, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        copied.synchronize()
        rows = out_host.sum(dim=1)
        ok = bool(torch.allclose(rows, torch.ones(16), atol=1e-5))
print(f"RESULT {'ok' if ok else 'WRONG'} row_sums_close_to_1={ok}")
