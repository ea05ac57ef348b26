"""Make a CUDA kernel on the first GPU CUDA sees write through a bad pointer.

The driver kills the context and reports an application XID (an MMU
fault, XID 31), which is what TestNodeRoleOnNVML and TestNVMLFaultHealth
in node watch vgpud's health watcher receive. Needs CuPy. Exits 0
only if the fault was reported to CUDA as expected.
"""
import os
import sys

import cupy

kernel = cupy.RawKernel(r'extern "C" __global__ void poke(int *p) { *p = 1; }', "poke")
kernel((1,), (1,), (cupy.uint64(0x10),))
try:
    cupy.cuda.runtime.deviceSynchronize()
except cupy.cuda.runtime.CUDARuntimeError as e:
    print("kernel faulted as intended:", e, flush=True)
    # Skip CuPy's teardown, which only repeats the error on the dead context.
    os._exit(0)
print("kernel wrote through a bad pointer without a fault", file=sys.stderr)
sys.exit(1)
