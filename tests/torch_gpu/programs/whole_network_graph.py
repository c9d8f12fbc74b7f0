"""The whole-network capture example of PyTorch's CUDA Graphs documentation
(docs/source/notes/cuda.rst, "Whole-network capture"): warm-up iterations on a side stream that
waits for the current one, capture of forward, backward and optimizer.step() with
torch.cuda.graph, then replays fed through static tensors with copy_; and
torch.cuda.make_graphed_callables on a second module. Correct: streamsan must report nothing.
Prints whether training through replays lowered the loss."""

import torch
import torch.nn as nn

torch.manual_seed(0)
dev = "cuda"
N, D_in, H, D_out = 64, 32, 64, 8
model = nn.Sequential(nn.Linear(D_in, H), nn.Dropout(p=0.2), nn.Linear(H, D_out), nn.Dropout(p=0.1)).to(dev)
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
static_input = torch.randn(N, D_in, device=dev)
static_target = torch.randn(N, D_out, device=dev)

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for i in range(3):
        optimizer.zero_grad(set_to_none=True)
        y_pred = model(static_input)
        loss = loss_fn(y_pred, static_target)
        loss.backward()
        optimizer.step()
torch.cuda.current_stream().wait_stream(s)

g = torch.cuda.CUDAGraph()
optimizer.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    static_y_pred = model(static_input)
    static_loss = loss_fn(static_y_pred, static_target)
    static_loss.backward()
    optimizer.step()

w = torch.randn(D_in, D_out, device=dev)
losses = []
for i in range(20):
    data = torch.randn(N, D_in, device=dev)
    static_input.copy_(data)
    static_target.copy_(data @ w)
    g.replay()
    losses.append(static_loss.item())

# make_graphed_callables on another module, used in a few training steps.
m2 = nn.Sequential(nn.Linear(D_in, H), nn.ReLU(), nn.Linear(H, D_out)).to(dev)
opt2 = torch.optim.SGD(m2.parameters(), lr=0.05)
sample = torch.randn(N, D_in, device=dev, requires_grad=True)
m2g = torch.cuda.make_graphed_callables(m2, (sample,))
for i in range(5):
    inp = torch.randn(N, D_in, device=dev, requires_grad=True)
    out = m2g(inp)
    l2 = out.pow(2).mean()
    opt2.zero_grad(set_to_none=True)
    l2.backward()
    opt2.step()
l2v = l2.item()
ok = losses[-1] < losses[0] and l2v == l2v
print(f"RESULT {'ok' if ok else 'WRONG'} first={losses[0]:.4f} last={losses[-1]:.4f} graphed_loss={l2v:.4f}")
