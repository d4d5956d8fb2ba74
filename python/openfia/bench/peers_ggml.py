"""ggml's CPU flash attention as an optional peer of the benchmark, through the PyPI package
ggml-python (`pip install ggml-python`: ctypes bindings over the ggml it builds at install time).

The peer exists only where `import ggml` works; the benchmark never installs it. For the decode
workloads whose shape ggml expresses (one query token, grouped-query heads, every sequence as long
as the cache, no mask beyond ggml's own zero mask) it builds one `ggml_flash_attn_ext` node over a
contiguous copy of the workload's KV in ggml's storage format: bf16 or f16 caches as they are,
int8 as q8_0 and int4 as q4_0 (ggml's 32-value blocks with one scale each, requantized from the
exactly dequantized values). ggml has no paged cache, so a paged workload's KV is handed over
contiguous: ggml then reads less scattered memory than openfia does.
"""
from __future__ import annotations

import ctypes

# The KV formats: the workload's KV dtype (and, for a float cache, the query dtype) -> ggml's type.
FLOAT_FORMATS = {"bf16": "bf16", "f16": "f16"}
QUANT_FORMATS = {"int8": "q8_0", "int4": "q4_0"}
QBLOCK = 32  # values per q8_0 / q4_0 block: the head size must be a multiple
WAKE_KV = 64  # KV length of the tiny graph that wakes the thread pool before a timed call


class Peer:
    """Whether ggml can run here (`available`, `why`: one line for the report) and the thread
    count its graphs are planned with."""

    def __init__(self, threads):
        self.threads = threads
        self.module = None
        try:
            import ggml
        except Exception as e:  # noqa: BLE001 - ImportError, or OSError when its library fails
            self.why = (f"no ggml column: `import ggml` failed ({type(e).__name__}: {e}); "
                        "`pip install ggml-python` adds it")
            return
        self.module = ggml
        self.why = f"ggml-python {getattr(ggml, '__version__', '(version unknown)')}"

    @property
    def available(self):
        return self.module is not None

    def status(self):
        """What the report needs: {"available": bool, "text": the one line}."""
        return {"available": self.available, "text": self.why}

    def build(self, w):
        """A FlashAttn over workload `w`, or None when ggml cannot express it."""
        fmt = ggml_format(w)
        if fmt is None or not self.available:
            return None
        return FlashAttn(self.module, w, fmt, self.threads)


def ggml_format(w):
    """ggml's KV type name for workload `w` ("bf16", "f16", "q8_0", "q4_0"), or None where one
    flash_attn_ext node does not compute the same attention (prefill masks, MLA's rope part,
    sequences of different lengths, full quantization)."""
    c = w.case
    if not w.decode or c.i("rope") or c.i("fullquant"):
        return None
    B, N, KVS = c.i("B"), c.i("N"), c.i("KVS")
    KVN, D = c.int_or("KVN", N), c.i("D")
    if c.int_or("DV", D) != D or N % KVN:
        return None
    lens = w.fia_kwargs.get("actual_seq_lengths_kv")
    if lens is not None and list(lens) != [KVS] * B:
        return None
    kv = c.p["kv"]
    if kv:
        return QUANT_FORMATS.get(kv) if D % QBLOCK == 0 else None
    return FLOAT_FORMATS.get(c.p["dtype"])


def _type(ggml, fmt):
    return {"bf16": ggml.GGML_TYPE_BF16, "f16": ggml.GGML_TYPE_F16,
            "q8_0": ggml.GGML_TYPE_Q8_0, "q4_0": ggml.GGML_TYPE_Q4_0}[fmt]


class _Graph:
    """One flash_attn_ext node in its own ggml context: Q f32 [D, S, N, B], K and V of type
    `kt` [D, KVS, KVN, B] filled from float32 rows, an all-zero f16 mask whose rows are padded to
    GGML_KQ_MASK_PAD (ggml requires it), planned for `threads` workers of `pool`."""

    def __init__(self, ggml, kt, q, k, v, scale, threads, pool):
        self.ggml = ggml
        B, N, S, D = q.shape
        KVN, KVS = k.shape[1], k.shape[2]
        pad = getattr(ggml, "GGML_KQ_MASK_PAD", 1)
        rows = (S + pad - 1) // pad * pad
        kv_bytes = ggml.ggml_row_size(kt, D) * KVS * KVN * B
        mem = (2 * kv_bytes + 4 * D * S * N * B * 2 + 2 * KVS * rows
               + 8 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead() + (1 << 20))
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None,
                                                        no_alloc=False))
        if not self.ctx:
            raise MemoryError(f"ggml_init could not allocate {mem} bytes")
        f32 = ggml.GGML_TYPE_F32
        tq = ggml.ggml_new_tensor_4d(self.ctx, f32, D, S, N, B)
        tk = ggml.ggml_new_tensor_4d(self.ctx, kt, D, KVS, KVN, B)
        tv = ggml.ggml_new_tensor_4d(self.ctx, kt, D, KVS, KVN, B)
        mask = ggml.ggml_new_tensor_4d(self.ctx, ggml.GGML_TYPE_F16, KVS, rows, 1, 1)
        ctypes.memset(ggml.ggml_get_data(mask), 0, ggml.ggml_nbytes(mask))
        # torch's [B, heads, rows, D] row-major order is ggml's [D, rows, heads, B].
        qa = q.float().contiguous().numpy()
        ctypes.memmove(ggml.ggml_get_data(tq), qa.ctypes.data, qa.nbytes)
        for t, x in ((tk, k), (tv, v)):
            xa = x.float().contiguous().numpy()
            ggml.ggml_quantize_chunk(kt, xa.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                     ggml.ggml_get_data(t), 0, KVS * KVN * B, D, None)
        self.out = ggml.ggml_flash_attn_ext(self.ctx, tq, tk, tv, mask, scale, 0.0, 0.0)
        self.shape = (B, S, N, D)  # the output, [D, N, S, B] in ggml's order
        self.graph = ggml.ggml_new_graph(self.ctx)
        ggml.ggml_build_forward_expand(self.graph, self.out)
        plan = ggml.ggml_graph_plan(self.graph, threads, pool)
        self.work = (ctypes.c_uint8 * max(1, plan.work_size))()
        plan.work_data = ctypes.cast(self.work, ctypes.POINTER(ctypes.c_uint8))
        self.plan = ctypes.pointer(plan)

    def compute(self):
        status = self.ggml.ggml_graph_compute(self.graph, self.plan)
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute returned status {status}")

    def output(self):
        import numpy as np
        import torch

        ptr = ctypes.cast(self.ggml.ggml_get_data(self.out), ctypes.POINTER(ctypes.c_float))
        o = torch.from_numpy(np.ctypeslib.as_array(ptr, shape=self.shape).copy())
        return o.permute(0, 2, 1, 3)  # [B, N, S, D]

    def free(self):
        if self.ctx:
            self.ggml.ggml_free(self.ctx)
            self.ctx = None


class FlashAttn:
    """Workload `w` as one ggml_flash_attn_ext node in format `fmt`, computed by a persistent
    ggml thread pool of `threads` workers (how llama.cpp runs ggml, so that a call does not start
    threads). Call it to compute; `output()` is the last result as [B, N, S, D] float32; `wake()`
    computes a tiny graph on the same pool (the benchmark's settle step before each timed call);
    `close()` frees ggml's memory and threads."""

    def __init__(self, ggml, w, fmt, threads):
        import torch

        self.ggml, self.format = ggml, fmt
        ggml.ggml_cpu_init()
        params = ggml.ggml_threadpool_params_default(threads)
        self.pool = ggml.ggml_threadpool_new(ctypes.byref(params))
        if not self.pool:
            raise RuntimeError(f"ggml_threadpool_new failed for {threads} threads")
        self.graphs = []
        try:
            kt = _type(ggml, fmt)
            scale = float(w.sdpa_kwargs["scale"])
            self.main = self._graph(kt, w.q_bnsd, w.k_ref, w.v_ref, scale, threads)
            D = w.q_bnsd.shape[-1]
            tiny_q = torch.zeros(1, 2, 1, D)
            tiny_kv = torch.zeros(1, 2, WAKE_KV, D)
            self.tiny = self._graph(kt, tiny_q, tiny_kv, tiny_kv, scale, threads)
        except BaseException:
            self.close()
            raise

    def _graph(self, *args):
        g = _Graph(self.ggml, *args, self.pool)
        self.graphs.append(g)
        return g

    def __call__(self):
        self.main.compute()

    def output(self):
        return self.main.output()

    def wake(self):
        self.tiny.compute()

    def close(self):
        for g in self.graphs:
            g.free()
        self.graphs = []
        if self.pool:
            self.ggml.ggml_threadpool_free(self.pool)
            self.pool = None


def note(results, status):
    """The report's line about the ggml column: why it is absent, or what it ran."""
    if not status or not status["available"]:
        return status["text"] if status else None
    ran = [f"{r['workload']} {r['ggml_format']}" for r in results if r.get("ggml_format")]
    return (f"ggml column: {status['text']}, one `ggml_flash_attn_ext` node (ggml's CPU flash "
            "attention) with an all-zero f16 mask, scale 1/sqrt(D), the same thread count and "
            "the same rounds as openfia; its KV has the workload's length, heads and head size "
            "but is contiguous (ggml has no paged cache) and in ggml's format: "
            + (", ".join(ran) if ran else "no workload ran")
            + " (q8_0 / q4_0: the int8 / int4 values requantized to ggml's 32-value blocks, its "
            "error in the details). \"-\": ggml's flash attention does not express that workload "
            "(prefill masks, MLA, the sparse operators).")

