#!/usr/bin/env python3
"""Holds GPU memory and keeps the SMs busy, for the usage proof (make nvml).

    hog.py MIB [BUSY]
    hog.py hold SOCKET

Allocates MIB MiB on GPU 0 (PyTorch, else CuPy), prints "ready <pid>",
and, when BUSY is 1, runs matrix products until killed. Lines on stdin:

    grow N        allocate N MiB more; prints "grown <total>"
    fork          fork a child that keeps every descriptor, the GPU's
                  among them, and touches no CUDA; prints "forked <pid>"
    pass SOCKET   send the GPU's descriptors (/dev/nvidia*) over the unix
                  socket SOCKET; prints "passed <n>"
    exit          end at once, leaving the descriptors' other holders

"hold SOCKET" listens on SOCKET, prints "listening <pid>", takes the
descriptors one process sends, prints "holding <n>", and keeps them
until killed.
"""
import array
import os
import socket
import sys
import threading
import time


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


def gpu_fds():
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + name).startswith("/dev/nvidia"):
                fds.append(int(name))
        except OSError:
            pass
    return fds


def hold(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    print("listening", os.getpid(), flush=True)
    conn, _ = srv.accept()
    fds = array.array("i")
    _, anc, _, _ = conn.recvmsg(1, socket.CMSG_LEN(256 * fds.itemsize))
    held = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            held.extend(array.array("i", data[: len(data) - len(data) % fds.itemsize]))
    print("holding", len(held), flush=True)
    while True:
        time.sleep(3600)


def main():
    if sys.argv[1] == "hold":
        hold(sys.argv[2])
        return
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
        elif f == ["fork"]:
            child = os.fork()
            if child == 0:
                while True:
                    time.sleep(3600)
            print("forked", child, flush=True)
        elif len(f) == 2 and f[0] == "pass":
            fds = gpu_fds()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(f[1])
            s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            print("passed", len(fds), flush=True)
        elif f == ["exit"]:
            os._exit(0)


if __name__ == "__main__":
    main()
