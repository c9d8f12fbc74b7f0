"""torch.utils.data.DataLoader with pin_memory=True (num_workers=0), batches moved with
non_blocking=True, a tiny CNN trained with SGD + momentum and a LR scheduler, evaluation with
argmax and .cpu(). Correct: streamsan must report nothing."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
dev = "cuda"
n = 256
xs = torch.randn(n, 1, 8, 8)
labels = (xs.mean(dim=(1, 2, 3)) > 0).long()
loader = DataLoader(TensorDataset(xs, labels), batch_size=32, shuffle=True, pin_memory=True, num_workers=0)
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
for epoch in range(4):
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sched.step()
model.eval()
with torch.no_grad():
    pred = model(xs.to(dev)).argmax(dim=1).cpu()
acc = (pred == labels).float().mean().item()
print(f"RESULT {'ok' if acc > 0.8 else 'WRONG'} accuracy={acc:.3f}")
