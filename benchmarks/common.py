"""Shared helpers for the benchmark scripts: arguments, timing, models, results.

Import this module before torch: it turns the disk compile cache off (unless
the environment already says otherwise) so a benchmark measures this process's
compiles, not what an earlier run left on disk. `import torch` autoloads
torch_tpu, which reads the setting at import time.
"""
import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TORCH_TPU_DISK_CACHE", "0")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

import torch_tpu  # noqa: E402

# CPU eager's intra-op threads spin-wait at OpenMP barriers: on a small shared
# machine (2 cores here, other processes running) 2 threads made the CPU
# baseline erratic (4 to 270 MLP steps/s between runs), 1 thread made it
# steady. Set TORCH_TPU_BENCH_THREADS to change it; the JSON records it.
torch.set_num_threads(int(os.environ.get("TORCH_TPU_BENCH_THREADS", "1")))

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
MODES = {"strict": "DEFER_NEVER", "debug": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
         "fused": "DEFER_AND_FUSE"}


# --- arguments and results ------------------------------------------------

def parser(doc):
    p = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    p.add_argument("--smoke", action="store_true", help="tiny, fast run (used by the tests)")
    p.add_argument("--out", default=RESULTS, help="folder for the .json and .md results")
    return p


def environment():
    """What the numbers were measured on: plugin, versions, load."""
    name, _, kind, _ = torch_tpu._C._platform()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {"plugin": name, "device_kind": kind, "host": platform.node(),
            "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "loadavg_1_5_15": [float(v) for v in load]}


def write_results(out_dir, name, data, markdown):
    """Writes <out_dir>/<name>.json (data plus the environment) and <name>.md."""
    os.makedirs(out_dir, exist_ok=True)
    data = dict(benchmark=name, **data)
    data["environment"] = environment()
    json_path = os.path.join(out_dir, name + ".json")
    with open(json_path, "w") as f:
        json.dump(data, f, indent=2)
    load = data["environment"]["loadavg_1_5_15"]
    footer = (f"\n{data['environment']['plugin']} plugin, torch {torch.__version__}, "
              f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(markdown + footer)
    print(markdown + footer)
    print(f"wrote {json_path}")


def table(headers, rows):
    """A markdown table; numeric columns right-aligned."""
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(headers))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ratio(a, b):
    return a / b if b else float("nan")


# --- timing ---------------------------------------------------------------

def sync(device):
    if torch.device(device).type == "tpu":
        torch.tpu.synchronize()


def set_mode(mode):
    """mode: "cpu" or a key of MODES; sets the tpu eager mode, returns the device."""
    if mode == "cpu":
        return torch.device("cpu")
    torch_tpu.set_eager_mode(MODES[mode])
    return torch.device("tpu")


def median(values):
    return statistics.median(values)


def now():
    return time.perf_counter()


# --- models ---------------------------------------------------------------

def quickstart_mlp():
    """The model of examples/quickstart.py."""
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


def quickstart_data(n=4096, seed=0, classes=4, dim=16):
    """The data of examples/quickstart.py (fixed-center Gaussian clusters)."""
    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 0.6
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    return centers[labels] + torch.randn(n, dim, generator=g), labels


class Block(nn.Module):
    """Pre-LN transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, dim, heads, sdpa=True):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if self.sdpa \
            else causal_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def causal_attention(q, k, v):
    """Explicit softmax attention with a causal mask (q, k, v: b, h, t, d)."""
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


@functools.lru_cache(maxsize=None)
def sdpa_works():
    """Whether F.scaled_dot_product_attention runs forward and backward on
    tpu (its math path needs aten::isneginf). Every device then uses the same
    attention, so the comparison is like for like."""
    q = torch.randn(1, 1, 4, 8, device="tpu", requires_grad=True)
    try:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        q.grad.cpu()
        return True
    except (NotImplementedError, RuntimeError):
        return False


class LstmLM(nn.Module):
    """A one-layer LSTM language model: embedding, nn.LSTM, output head (on tpu
    the LSTM runs as two matmuls and a fused cell op per time step)."""

    def __init__(self, vocab=256, dim=32, hidden=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        y, _ = self.rnn(self.emb(x))
        return self.head(y)


class TinyTransformer(nn.Module):
    """Token and position embeddings, pre-LN blocks, final LayerNorm, LM head."""

    def __init__(self, vocab=256, dim=64, heads=4, layers=2, seq=32, sdpa=True):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, sdpa) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Task:
    """A model, its AdamW optimizer and a fixed batch; step() is one training
    step (forward, cross-entropy, backward, optimizer step) with no host read."""

    def __init__(self, kind, device, small=False, capturable=False):
        self.attention = None
        if kind == "transformer":
            self.attention = "sdpa" if sdpa_works() else "explicit"
        torch.manual_seed(0)
        if kind == "mlp":
            self.model = quickstart_mlp()
            x, y = quickstart_data(n=128 if small else 4096)
            idx = torch.arange(32 if small else 128)
            self.x, self.y = x[idx], y[idx]
        elif kind == "trivial":  # device work next to nothing: a step's cost is its host cost
            self.model = nn.Linear(4, 4)
            self.x, self.y = torch.randn(2, 4), torch.tensor([0, 3])
        elif kind == "transformer":
            vocab, seq = 256, (8 if small else 32)
            self.model = TinyTransformer(vocab=vocab, dim=32 if small else 64,
                                         layers=1 if small else 2, seq=seq,
                                         sdpa=self.attention == "sdpa")
            g = torch.Generator().manual_seed(0)
            tokens = torch.randint(0, vocab, (2 if small else 8, seq + 1), generator=g)
            self.x, self.y = tokens[:, :-1], tokens[:, 1:]
        elif kind == "lstm":
            vocab, seq = 256, (8 if small else 16)
            self.model = LstmLM(vocab=vocab)
            g = torch.Generator().manual_seed(0)
            tokens = torch.randint(0, vocab, (2 if small else 8, seq + 1), generator=g)
            self.x, self.y = tokens[:, :-1], tokens[:, 1:]
        else:
            raise ValueError(f"unknown model {kind!r}")
        self.model.to(device)
        self.x, self.y = self.x.to(device), self.y.to(device)
        # capturable: the step count on the device, as a captured step needs.
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=1e-2,
                                     capturable=capturable)
        self.loss = None

    def step(self):
        logits = self.model(self.x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.y.reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.loss = loss

    def tensors(self):
        """Every tensor the task holds between steps (for CPU memory accounting)."""
        out = [self.x, self.y]
        for p in self.model.parameters():
            out.append(p)
            if p.grad is not None:
                out.append(p.grad)
        for state in self.opt.state.values():
            out += [v for v in state.values() if isinstance(v, torch.Tensor)]
        return out


class CapturedTask:
    """A tpu Task whose step is captured once (torch.tpu.graph) after
    `warmup` eager steps; step() replays it: one program, no dispatch."""

    def __init__(self, kind, small=False, warmup=1):
        self.task = Task(kind, torch.device("tpu"), small=small, capturable=True)
        for _ in range(warmup):
            self.task.step()
        self.graph = torch.tpu.TPUGraph()
        with torch.tpu.graph(self.graph):
            self.task.step()

    def step(self):
        self.graph.replay()

    @property
    def loss(self):
        return self.task.loss


class CompiledTask:
    """A tpu Task whose whole step (forward, loss, zero_grad, backward,
    optimizer step) runs through torch.compile(backend="tpu"); AdamW with
    capturable=True (a host step count would be a new graph every step)."""

    def __init__(self, kind, small=False):
        # Every CompiledTask compiles the same code (Task.step): earlier
        # tasks' frames would count against Dynamo's recompile limit, past
        # which a step silently runs eagerly. One compiled task at a time.
        torch._dynamo.reset()
        self.task = Task(kind, torch.device("tpu"), small=small, capturable=True)
        self.step = torch.compile(self.task.step, backend="tpu")

    @property
    def loss(self):
        return self.task.loss


# --- CPU memory -----------------------------------------------------------

class _LiveStorages(TorchDispatchMode):
    """Tracks the bytes of live CPU storages (those given at the start and
    those ops create under it), and their peak."""

    def __init__(self, tensors):
        super().__init__()
        self.refs = {}
        for t in tensors:
            self._track(t)
        self.peak = self._live()

    def _track(self, t):
        s = t.untyped_storage()
        old = self.refs.get(s.data_ptr())
        if s.nbytes() and (old is None or old[0].expired()):
            self.refs[s.data_ptr()] = (StorageWeakRef(s), s.nbytes())

    def _live(self):
        return sum(n for ref, n in self.refs.values() if not ref.expired())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in _flat_tensors(result):
            self._track(t)
        self.peak = max(self.peak, self._live())
        return result


def _flat_tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def cpu_peak_bytes(task):
    """Peak bytes of live tensor storage during one CPU training step,
    counting what the task holds (parameters, gradients, optimizer state,
    data). The CPU allocator keeps no statistics, so storages are tracked op
    by op (slow: for memory only, never inside a timed loop)."""
    mode = _LiveStorages(task.tensors())
    with mode:
        task.step()
    return mode.peak


def tpu_peak_bytes(task, steps):
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    for _ in range(steps):
        task.step()
    torch.tpu.synchronize()
    return torch.tpu.max_memory_allocated()


def run_script_path(name):
    return os.path.join(HERE, name)


def python():
    return sys.executable
