#!/usr/bin/env python3
"""libcuprof_inject.so as NVTX's extension loader finds it (nvtx3/nvtxDetail/nvtxExtInit.h):
it exports InitializeInjectionNvtxExtension, serves the payload module's range push and pop
(slots 3 and 4) and nothing else, leaves a module it does not know untouched (another module,
or the two-slot payload module of older NVTX copies, as NCCL 2.19 to 2.21 carry), and its pop
with no tracer attached (no GPU here) returns as NVTX's own does with no tool.

  python3 tests/cli/nvtx_extension.py build/tools/libcuprof_inject.so
"""
import ctypes
import sys


class Segment(ctypes.Structure):
    _fields_ = [("segmentId", ctypes.c_size_t), ("slotCount", ctypes.c_size_t),
                ("functionSlots", ctypes.POINTER(ctypes.c_ssize_t))]


class Module(ctypes.Structure):
    _fields_ = [("nvtxVer", ctypes.c_uint16), ("structSize", ctypes.c_uint16), ("moduleId", ctypes.c_uint16),
                ("compatId", ctypes.c_uint16), ("segmentsCount", ctypes.c_size_t),
                ("segments", ctypes.POINTER(Segment)), ("getExportFunction", ctypes.c_void_p),
                ("extInfo", ctypes.c_void_p)]


class PayloadData(ctypes.Structure):  # nvtxPayloadData_t
    _fields_ = [("schemaId", ctypes.c_uint64), ("size", ctypes.c_size_t), ("payload", ctypes.c_void_p)]


PAYLOAD_MODULE, PUSH, POP, NO_PUSH_POP_TRACKING = 2, 3, 4, -2


def main():
    lib = ctypes.CDLL(sys.argv[1])
    init = lib.InitializeInjectionNvtxExtension
    init.argtypes, init.restype = [ctypes.POINTER(Module)], ctypes.c_int
    failures = []

    def module(module_id, slot_count):
        slots = (ctypes.c_ssize_t * slot_count)()
        segment = Segment(0, slot_count, slots)
        return Module(3, ctypes.sizeof(Module), module_id, 0x0104, 1, ctypes.pointer(segment), None, None), slots, segment

    def check(what, ok):
        print(("[PASS] " if ok else "[FAIL] ") + what)
        if not ok:
            failures.append(what)

    m, slots, keep = module(PAYLOAD_MODULE, 63)
    check("the payload module is served", init(ctypes.byref(m)) == 1)
    check("its range push and pop are functions", slots[PUSH] > 4 and slots[POP] > 4)
    check("its other slots stay as NVTX left them", all(slots[i] == 0 for i in range(63) if i not in (PUSH, POP)))
    pop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(PayloadData), ctypes.c_size_t)(slots[POP])
    payload = (ctypes.c_ubyte * 24)()
    entry = PayloadData((1 << 24) + 11, 24, ctypes.cast(payload, ctypes.c_void_p))
    check("a pop with no tracer attached returns NVTX_NO_PUSH_POP_TRACKING", pop(None, ctypes.byref(entry), 1) == NO_PUSH_POP_TRACKING)
    old, old_slots, keep_old = module(PAYLOAD_MODULE, 2)
    check("a two-slot payload module is not served", init(ctypes.byref(old)) == 0 and list(old_slots) == [0, 0])
    other, other_slots, keep_other = module(3, 63)
    check("another module is not served", init(ctypes.byref(other)) == 0 and not any(other_slots))
    check("no module: refused", init(None) == 0)
    print(f"nvtx_extension: {7 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
