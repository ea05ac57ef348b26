"""Report what a CUDA program sees of its first GPU, for TestNVMLInterposerHoldsTheSlice.

Takes the slice's memory limit in MiB and prints one JSON line: the GPU's
total memory as CUDA reports it, and whether allocating 1 GiB under and
1 GiB over the limit succeeded. It calls the CUDA driver API (libcuda)
through ctypes, so it needs nothing beyond the driver.
"""
import ctypes
import json
import sys

limit = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1")


def check(result, what):
    if result != 0:
        sys.exit(f"{what}: CUresult {result}")


check(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def can_allocate(mib):
    ptr = ctypes.c_uint64()
    if cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20)) != 0:
        return False
    check(cuda.cuMemFree_v2(ptr), "cuMemFree")
    return True


free, total = ctypes.c_size_t(), ctypes.c_size_t()
check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
print(json.dumps({"totalMiB": total.value >> 20, "under": can_allocate(limit - 1024), "over": can_allocate(limit + 1024)}))
