#!/usr/bin/env python3
"""Holds GPU memory and keeps the SMs busy, for the usage proof (make nvml).

    hog.py MIB [BUSY]

Allocates MIB MiB on GPU 0 (PyTorch, else CuPy), prints "ready <pid>",
and, when BUSY is 1, runs matrix products until killed. A line "grow N"
on stdin allocates N MiB more and prints "grown <total>".
"""
import os
import sys
import threading


def backend():
    try:
        import torch

        def alloc(mib):
            return torch.empty(mib << 20, dtype=torch.uint8, device="cuda:0")

        def work():
            a = torch.randn(2048, 2048, device="cuda:0")
            while True:
                a @ a
                torch.cuda.synchronize()

        return alloc, work
    except ImportError:
        import cupy

        def alloc(mib):
            return cupy.empty(mib << 20, dtype=cupy.uint8)

        def work():
            a = cupy.random.rand(2048, 2048, dtype=cupy.float32)
            while True:
                a @ a
                cupy.cuda.Device(0).synchronize()

        return alloc, work


def main():
    mib = int(sys.argv[1])
    busy = len(sys.argv) > 2 and sys.argv[2] == "1"
    alloc, work = backend()
    held = [alloc(mib)]
    total = mib
    if busy:
        threading.Thread(target=work, daemon=True).start()
    print("ready", os.getpid(), flush=True)
    for line in sys.stdin:
        f = line.split()
        if len(f) == 2 and f[0] == "grow":
            held.append(alloc(int(f[1])))
            total += int(f[1])
            print("grown", total, flush=True)


if __name__ == "__main__":
    main()
