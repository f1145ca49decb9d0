"""scripts/bench-gpu.py: does dsv's PyTorch loader (the README's snippet) keep a real GPU
training loop fed, against a plain torch Dataset over a checkout of the same files?

Run through scripts/bench-gpu (which installs the wheel from .devbench/ on the device
machine); see its header for the whole procedure. Needs torch, numpy, Pillow and dsv;
nvidia-ml-py (pynvml) for GPU utilization (reported as n/a without it). On a machine without
CUDA it trains on the CPU: a smoke test, not a measurement.

Steps: N copies of the 10,000 MNIST test PNGs (each copy with a distinct 8-byte trailer, as
scripts/bench-python builds them) -> `dsv init` + `dsv commit` -> `dsv checkout`; then
  (a) dsv.torch.IterableVersionDataset(v, shuffle=True, seed=0, equal_per_rank=True,
      transform=decode) + dsv.torch.DataLoader(batch_size=256, num_workers=W), as README.md
      shows it (plus pin_memory on CUDA, as for (b));
  (b) a plain map-style torch Dataset opening and reading the checkout's files,
      torch.utils.data.DataLoader(batch_size=256, num_workers=W, shuffle=True);
each decoding with Pillow to a uint8 tensor, the label from the file name (NNNNNN-numD.png).
Measured: the model alone on device-resident batches (what the GPU could take), one pass of
each loader without training (what the loader can give), then E training epochs per loader,
alternating a, b, a, b, ... (a swing in the machine's load hits both), each loader training
its own copy of one small CNN from the same initial weights with the same optimizer.
Per epoch: samples/s, seconds to the first batch, the share of wall time the loop spent in
next(iterator), GPU utilization (pynvml, sampled every 100 ms: mean and median), the share
of wall time the CUDA stream was busy with the training steps (CUDA events), the CPU busy
share of the machine (/proc/stat) and the CPU seconds of the loader's worker processes.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

import dsv
from dsv.torch import DataLoader, IterableVersionDataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARBALL = "mnist-10k-test-png.tar.gz"


def say(*args):
    print(time.strftime("%H:%M:%S"), *args, flush=True)


# ---------------------------------------------------------------------------- samples


def label_of(path):
    """The digit of `.../NNNNNN-numD.png` (the tarball's naming)."""
    return int(path[path.rindex("-num") + 4])


def decode_image(data):
    return torch.from_numpy(np.array(Image.open(io.BytesIO(data)), dtype=np.uint8))


def decode(path, data):
    """The README's `transform(path, data)`: (28x28 uint8 image, label)."""
    return decode_image(data), label_of(path)


class CheckoutDataset(torch.utils.data.Dataset):
    """ImageFolder style: the files of a directory, each opened and read per sample."""

    def __init__(self, root):
        self.paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
        self.labels = [label_of(p) for p in self.paths]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return decode_image(f.read()), self.labels[i]


# ---------------------------------------------------------------------------- model


class SmallCNN(nn.Module):
    """Two conv layers and two fully connected ones: a usual MNIST model (~0.42 M weights)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class Trainer:
    """One model + optimizer; `step` moves a loader batch to the device and trains on it.
    No host sync per step: loss and hits accumulate on the device, read at the epoch's end."""

    def __init__(self, init_state, device, amp):
        self.device, self.amp = device, amp
        self.cuda = device.type == "cuda"
        self.model = SmallCNN()
        self.model.load_state_dict(init_state)
        self.model.to(device)
        if self.cuda:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.reset_totals()

    def reset_totals(self):
        self.loss_sum = torch.zeros((), device=self.device)
        self.hits = torch.zeros((), dtype=torch.long, device=self.device)

    def step(self, images, labels):
        x = images.to(self.device, non_blocking=True).unsqueeze(1).float().div_(255.0)
        if self.cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        y = labels.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            logits = self.model(x)
            loss = F.cross_entropy(logits, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.loss_sum += loss.detach().float() * y.shape[0]
        self.hits += (logits.argmax(1) == y).sum()


# ---------------------------------------------------------------------------- monitors


class GpuUtil:
    """nvmlDeviceGetUtilizationRates(handle).gpu every 100 ms on a background thread."""

    def __init__(self, index=None):
        self.handle, self.error = None, None
        if index is None:
            self.error = "not on CUDA"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.name = pynvml.nvmlDeviceGetName(self.handle)
            self.driver = pynvml.nvmlSystemGetDriverVersion()
            pynvml.nvmlDeviceGetUtilizationRates(self.handle)
        except Exception as e:  # absent package, no driver, no GPU
            self.handle, self.error = None, f"{type(e).__name__}: {e}"

    def __enter__(self):
        self.samples, self.stop = [], threading.Event()
        if self.handle is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self):
        while not self.stop.is_set():
            try:
                self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            except Exception:
                pass
            self.stop.wait(0.1)

    def __exit__(self, *exc):
        self.stop.set()
        if self.handle is not None:
            self.thread.join()

    def summary(self):
        if not self.samples:
            return None, None, 0
        return statistics.fmean(self.samples), statistics.median(self.samples), len(self.samples)


def cpu_times():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    except OSError:
        return None


def cpu_seconds(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def cpu_busy(before, after):
    if before is None or after is None or after[0] == before[0]:
        return None
    return 100.0 * (1 - (after[1] - before[1]) / (after[0] - before[0]))


# ---------------------------------------------------------------------------- epochs


def run_epoch(loader, trainer, gpu, expected, sync):
    """One pass over `loader`, training on each batch when `trainer` is given."""
    events = []
    label_counts = torch.zeros(10, dtype=torch.long)
    if trainer is not None:
        trainer.reset_totals()
    cpu0 = cpu_times()
    self0, kids0 = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    with gpu:
        start = time.perf_counter()
        it = iter(loader)
        first = None
        wait = 0.0
        n = 0
        t0 = start
        while True:
            try:
                images, labels = next(it)
            except StopIteration:
                wait += time.perf_counter() - t0
                break
            t1 = time.perf_counter()
            wait += t1 - t0
            if first is None:
                first = t1 - start
            n += labels.shape[0]
            label_counts += torch.bincount(labels, minlength=10)
            if trainer is not None:
                if trainer.cuda:
                    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                    ev[0].record()
                trainer.step(images, labels)
                if trainer.cuda:
                    ev[1].record()
                    events.append(ev)
            t0 = time.perf_counter()
        sync()
        took = time.perf_counter() - start
    del it  # an exhausted iterator has shut its workers down (joined): their CPU time is counted
    cpu = cpu_busy(cpu0, cpu_times())
    main_cpu = cpu_seconds(resource.RUSAGE_SELF) - self0
    workers_cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - kids0
    if n != expected:
        raise SystemExit(f"bench-gpu: FAIL: {n} samples in an epoch, expected {expected}")
    util_mean, util_median, util_n = gpu.summary()
    row = {
        "samples": n,
        "seconds": took,
        "samples_per_s": n / took,
        "first_batch_s": first,
        "loader_wait_share": wait / took,
        "gpu_util_mean": util_mean,
        "gpu_util_median": util_median,
        "gpu_util_samples": util_n,
        "gpu_stream_busy_share": (sum(a.elapsed_time(b) for a, b in events) / 1000.0 / took) if events else None,
        "cpu_busy_pct": cpu,
        "main_process_cpu_s": main_cpu,
        "workers_cpu_s": workers_cpu,
        "label_counts": label_counts.tolist(),
    }
    if trainer is not None:
        row["train_loss"] = trainer.loss_sum.item() / n
        row["train_acc"] = trainer.hits.item() / n
    return row


def model_ceiling(init_state, device, amp, batch, sync, steps):
    """Training steps on one batch already on the device: the samples/s the model can take."""
    t = Trainer(init_state, device, amp)
    images = torch.randint(0, 256, (batch, 28, 28), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    for _ in range(max(3, steps // 5)):
        t.step(images, labels)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        t.step(images, labels)
    sync()
    return steps * batch / (time.perf_counter() - start)


def warm_up(init_state, device, amp, batch, tail, sync):
    """cuDNN/cuBLAS set-up for both batch shapes (full and the epoch's last), off the clock."""
    t = Trainer(init_state, device, amp)
    for b in {batch, tail or batch}:
        for _ in range(3):
            t.step(torch.zeros((b, 28, 28), dtype=torch.uint8), torch.zeros(b, dtype=torch.long))
    sync()


# ---------------------------------------------------------------------------- set-up


def find_tarball(given):
    if given:
        return given
    candidates = [os.path.join(REPO, ".devbench", TARBALL)]
    if os.environ.get("DSV_DATA"):
        candidates.append(os.path.join(os.environ["DSV_DATA"], TARBALL))
    candidates += [os.path.join(REPO, "..", "shared", "data", TARBALL), os.path.join("/work/shared/data", TARBALL)]
    for c in candidates:
        if os.path.isfile(c):
            return c
    raise SystemExit(f"bench-gpu: FAIL: no {TARBALL} (looked in {', '.join(candidates)}; pass --data)")


def build_data(tarball, dst, copies):
    """`copies` x the tarball's PNGs, copy c file i with the 8-byte trailer c*100000+i."""
    with tarfile.open(tarball) as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: m.name)
        blobs = [(m.name, tar.extractfile(m).read()) for m in members]
    size = 0
    for c in range(copies):
        for i, (name, data) in enumerate(blobs):
            out = os.path.join(dst, f"copy{c}", name)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            blob = data + (c * 100000 + i).to_bytes(8, "little")
            with open(out, "wb") as g:
                g.write(blob)
            size += len(blob)
    return len(blobs) * copies, size


def dsv_command():
    if os.environ.get("DSV_BIN"):
        return [os.environ["DSV_BIN"]]
    return [sys.executable, "-m", "dsv"]


def dsv_cli(*args, store=None):
    cmd = dsv_command() + ["--no-progress"] + (["--store", store] if store else []) + list(args)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench-gpu: FAIL: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def fmt(v, spec, na="n/a"):
    return na if v is None else format(v, spec)


def pct(v):
    return "n/a" if v is None else f"{v:.0f}%"


# ---------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=7, help="copies of the 10,000 PNGs (default 7: 70,000 files)")
    ap.add_argument("--epochs", type=int, default=2, help="training epochs per loader (default 2)")
    ap.add_argument("--workers", type=int, default=8, help="DataLoader num_workers for both (default 8)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--no-amp", action="store_true", help="no bf16 autocast on CUDA")
    ap.add_argument("--ceiling-steps", type=int, default=None, help="steps of the model-alone measurement")
    ap.add_argument("--data", default=None, help=f"the {TARBALL} (default: .devbench/, then $DSV_DATA, ../shared/data)")
    ap.add_argument("--work", default=None, help="work directory (default: a new one under /tmp, removed after)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    amp = cuda and not args.no_amp
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.backends.cudnn.benchmark = True
    gpu = GpuUtil(torch.cuda.current_device() if device.index is None else device.index) if cuda else GpuUtil()

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device) if cuda else f"cpu ({platform.processor() or platform.machine()})",
        "driver": getattr(gpu, "driver", None),
        "cpus": os.cpu_count(),
        "dsv_version": dsv.__version__,
        "dsv_build": getattr(dsv, "__build__", None),
        "dsv_module": os.path.dirname(dsv.__file__),
        "dsv_cli": " ".join(dsv_command()),
        "pynvml": "ok" if gpu.handle is not None else f"n/a ({gpu.error})",
    }
    settings = {
        "copies": args.copies, "epochs": args.epochs, "workers": args.workers, "batch_size": args.batch_size,
        "amp_bf16": amp, "channels_last": cuda, "pin_memory": cuda, "optimizer": "AdamW lr=1e-3",
        "model": "SmallCNN: conv 1-32-64 (3x3, ReLU, maxpool) + fc 3136-128-10",
    }
    for k, v in env.items():
        say(f"{k:<12} {v}")
    say("settings    ", json.dumps(settings))
    if not cuda:
        say("NOTE: no CUDA: training on the CPU, a smoke test only (GPU utilization n/a)")

    work = args.work or tempfile.mkdtemp(prefix="dsv-bench-gpu-")
    os.makedirs(work, exist_ok=True)
    setup = {}
    try:
        tarball = find_tarball(args.data)
        data, store, checkout = (os.path.join(work, d) for d in ("data", "store", "checkout"))
        t = time.perf_counter()
        n, size = build_data(tarball, data, args.copies)
        setup["build_data_s"] = time.perf_counter() - t
        say(f"built {n:,} files ({size / 1e6:.1f} MB) in {setup['build_data_s']:.1f} s from {tarball}")
        t = time.perf_counter()
        dsv_cli("init", store)
        dsv_cli("commit", data, "--dataset", "mnist", "-m", "bench-gpu", "--tag", "v1", store=store)
        setup["init_commit_s"] = time.perf_counter() - t
        t = time.perf_counter()
        dsv_cli("checkout", "mnist@v1", checkout, store=store)
        setup["checkout_s"] = time.perf_counter() - t
        say(f"dsv init + commit {setup['init_commit_s']:.1f} s, checkout {setup['checkout_s']:.1f} s")

        # (a) the README's snippet.
        v = dsv.Store(store).version("mnist@v1")
        assert len(v) == n, (len(v), n)
        pin = {"pin_memory": True} if cuda else {}
        ds = IterableVersionDataset(v, shuffle=True, seed=0, equal_per_rank=True, transform=decode)
        loader_a = DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers, **pin)
        # (b) a plain Dataset over the checkout.
        cds = CheckoutDataset(checkout)
        assert len(cds) == n, (len(cds), n)
        loader_b = torch.utils.data.DataLoader(cds, batch_size=args.batch_size, num_workers=args.workers,
                                               shuffle=True, generator=torch.Generator().manual_seed(0), **pin)
        loaders = {"a": loader_a, "b": loader_b}
        names = {"a": "dsv IterableVersionDataset (README)", "b": "torch Dataset over checkout"}

        torch.manual_seed(0)
        init_state = SmallCNN().state_dict()
        warm_up(init_state, device, amp, args.batch_size, n % args.batch_size, sync)
        steps = args.ceiling_steps or (300 if cuda else 10)
        ceiling = model_ceiling(init_state, device, amp, args.batch_size, sync, steps)
        say(f"model alone, batches already on {device.type}: {ceiling:,.0f} samples/s ({steps} steps)")

        rows = []

        def record(kind, key, epoch, trainer):
            if key == "a":
                ds.set_epoch(epoch)
            r = run_epoch(loaders[key], trainer, gpu, n, sync)
            r.update(kind=kind, loader=key, name=names[key], epoch=epoch)
            rows.append(r)
            extra = f"  loss {r['train_loss']:.3f} acc {r['train_acc']:.3f}" if trainer else ""
            say(f"{kind:<11} ({key}) epoch {epoch}: {r['samples_per_s']:>9,.0f} samples/s  first batch "
                f"{r['first_batch_s']:.2f} s  wait {100 * r['loader_wait_share']:4.1f}%  GPU util "
                f"{pct(r['gpu_util_mean'])}  stream busy {fmt(r['gpu_stream_busy_share'], '.1%')}  "
                f"CPU {fmt(r['cpu_busy_pct'], '.0f')}% (workers {r['workers_cpu_s']:.1f} s, main {r['main_process_cpu_s']:.1f} s){extra}")
            return r

        # One pass of each loader without training: what each can give (also warms the page cache).
        for key in ("a", "b"):
            record("loader-only", key, 0, None)
        trainers = {k: Trainer(init_state, device, amp) for k in ("a", "b")}
        for e in range(args.epochs):
            for key in ("a", "b"):
                record("train", key, e, trainers[key])
        train = [r for r in rows if r["kind"] == "train"]
        counts = {tuple(r["label_counts"]) for r in rows}
        if len(counts) != 1:
            raise SystemExit(f"bench-gpu: FAIL: label counts differ between epochs/loaders: {counts}")

        def mean(key, field, kind="train"):
            vals = [r[field] for r in rows if r["kind"] == kind and r["loader"] == key and r[field] is not None]
            return statistics.fmean(vals) if vals else None

        summary = {}
        for key in ("a", "b"):
            summary[key] = {
                "name": names[key],
                "train_samples_per_s_mean": mean(key, "samples_per_s"),
                "train_samples_per_s_best": max(r["samples_per_s"] for r in train if r["loader"] == key),
                "first_batch_s_mean": mean(key, "first_batch_s"),
                "loader_wait_share_mean": mean(key, "loader_wait_share"),
                "gpu_util_mean": mean(key, "gpu_util_mean"),
                "gpu_util_median_mean": mean(key, "gpu_util_median"),
                "gpu_stream_busy_share_mean": mean(key, "gpu_stream_busy_share"),
                "loader_only_samples_per_s": mean(key, "samples_per_s", "loader-only"),
                "workers_cpu_s_mean": mean(key, "workers_cpu_s"),
            }
        summary["a_over_b_train_samples_per_s"] = summary["a"]["train_samples_per_s_mean"] / summary["b"]["train_samples_per_s_mean"]
        summary["a_over_b_loader_only_samples_per_s"] = summary["a"]["loader_only_samples_per_s"] / summary["b"]["loader_only_samples_per_s"]
        summary["model_alone_samples_per_s"] = ceiling

        print()
        print(f"== bench-gpu: {n:,} MNIST PNGs, batch {args.batch_size}, {args.workers} workers, "
              f"{env['device']}, torch {env['torch']}, dsv {env['dsv_build'] or env['dsv_version']}")
        hdr = (f"{'run':<12}{'loader':<41}{'ep':>3}{'samples/s':>11}{'1st batch s':>12}{'wait %':>8}"
               f"{'GPU util % mean/med':>21}{'stream busy':>12}{'CPU %':>7}{'wkr CPU s':>10}{'loss':>7}{'acc':>7}")
        print(hdr)
        print("-" * len(hdr))
        for r in rows:
            util = f"{fmt(r['gpu_util_mean'], '.0f')}/{fmt(r['gpu_util_median'], '.0f')}"
            print(f"{r['kind']:<12}{'(' + r['loader'] + ') ' + r['name']:<41}{r['epoch']:>3}{r['samples_per_s']:>11,.0f}"
                  f"{r['first_batch_s']:>12.2f}{100 * r['loader_wait_share']:>8.1f}{util:>21}"
                  f"{fmt(r['gpu_stream_busy_share'], '.1%'):>12}{fmt(r['cpu_busy_pct'], '.0f'):>7}{r['workers_cpu_s']:>10.1f}"
                  f"{fmt(r.get('train_loss'), '.3f', '-'):>7}{fmt(r.get('train_acc'), '.3f', '-'):>7}")
        print()
        print(f"model alone (batches already on the device): {ceiling:,.0f} samples/s")
        for key in ("a", "b"):
            s = summary[key]
            print(f"({key}) {s['name']:<36} train mean {s['train_samples_per_s_mean']:>9,.0f} samples/s "
                  f"(best {s['train_samples_per_s_best']:,.0f}), loader alone {s['loader_only_samples_per_s']:,.0f}; "
                  f"first batch {s['first_batch_s_mean']:.2f} s; wait {100 * s['loader_wait_share_mean']:.1f}%; "
                  f"GPU util {pct(s['gpu_util_mean'])} (median {pct(s['gpu_util_median_mean'])}); "
                  f"stream busy {fmt(s['gpu_stream_busy_share_mean'], '.1%')}; workers' CPU {s['workers_cpu_s_mean']:.1f} s/epoch")
        print(f"(a)/(b) training samples/s: {summary['a_over_b_train_samples_per_s']:.2f}x; "
              f"loader alone: {summary['a_over_b_loader_only_samples_per_s']:.2f}x")
        fed = {k: summary[k]["train_samples_per_s_mean"] / ceiling for k in ("a", "b")}
        waits = {k: summary[k]["loader_wait_share_mean"] for k in ("a", "b")}
        print(f"the loop waited on the loader {waits['a']:.0%} (a) and {waits['b']:.0%} (b) of its wall time; "
              f"it trained at {fed['a']:.0%} (a) and {fed['b']:.0%} (b) of the model-alone rate")
        if not cuda:
            print("(CPU run: a smoke test of the script, not a measurement)")

        result = {"env": env, "settings": settings, "setup": setup, "files": n, "bytes": size,
                  "epochs": rows, "summary": summary}
        out = os.environ.get("OUT")
        if out:
            path = os.path.join(out, "bench-gpu.json")
            with open(path, "w") as f:
                json.dump(result, f, indent=1)
            print(f"wrote {path}")
        else:
            print("JSON:", json.dumps(result))
    finally:
        if args.keep:
            print(f"kept {work}")
        elif not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
