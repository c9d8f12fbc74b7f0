"""A small, correct training loop as people write it: pinned host batches copied with
non_blocking=True, autocast (bfloat16), backward, gradient clipping, Adam (foreach kernels),
a validation pass under no_grad, loss.item() every few steps. Nothing here races: streamsan
must report nothing. Prints the final loss (it must fall)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
dev = "cuda"
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 1)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
w_true = torch.randn(64, 1)
xs = torch.randn(512, 64)
ys = xs @ w_true + 0.01 * torch.randn(512, 1)
xs, ys = xs.pin_memory(), ys.pin_memory()
first = last = None
for step in range(40):
    i = (step * 64) % 512
    x = xs[i : i + 64].to(dev, non_blocking=True)
    y = ys[i : i + 64].to(dev, non_blocking=True)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        pred = model(x)
        loss = nn.functional.mse_loss(pred.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step % 10 == 0 or step == 39:
        value = loss.item()
        first = value if first is None else first
        last = value
with torch.no_grad():
    val = nn.functional.mse_loss(model(xs[:128].to(dev)), ys[:128].to(dev)).item()
print(f"RESULT {'ok' if last < first else 'WRONG'} first_loss={first:.4f} last_loss={last:.4f} val={val:.4f}")
