"""A small Transformer encoder trained with float16 autocast and GradScaler (scaled loss,
unscale_, inf checks, skipped steps), scaled-dot-product attention, plus a cuDNN LSTM forward
and backward: the kernels and host synchronizations of mixed-precision training. Correct:
streamsan must report nothing. Prints whether the loss fell."""

import torch
import torch.nn as nn

torch.manual_seed(0)
dev = "cuda"
enc = nn.TransformerEncoder(
    nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True), num_layers=2
).to(dev)
lstm = nn.LSTM(64, 32, batch_first=True).to(dev)
head = nn.Linear(32, 1).to(dev)
params = list(enc.parameters()) + list(lstm.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(16, 12, 64, device=dev)
target = x.mean(dim=(1, 2)).unsqueeze(1)
losses = []
for step in range(15):
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        h = enc(x)
        out, _ = lstm(h)
        loss = nn.functional.mse_loss(head(out[:, -1]).float(), target)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(opt)
    scaler.update()
    losses.append(loss.item())
ok = losses[-1] < losses[0]
print(f"RESULT {'ok' if ok else 'WRONG'} first={losses[0]:.4f} last={losses[-1]:.4f} scale={scaler.get_scale()}")
