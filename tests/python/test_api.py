"""API compatibility with torch_npu: signature, torch.ops registration and schema, fake kernels
and torch.compile, error plumbing (exact C++ messages), runtime settings, patch_torch_npu."""
import inspect
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import openfia
from cases import build_inputs, call_kwargs, tier_cases
from common import run_openfia

fia = openfia.npu_fused_infer_attention_score

# The signature in the torch_npu documentation of npu_fused_infer_attention_score, verbatim.
TORCH_NPU_SIGNATURE = (
    "npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, "
    "actual_seq_lengths=None, actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None, "
    "dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None, "
    "antiquant_offset=None, block_table=None, query_padding_size=None, kv_padding_size=None, "
    "key_antiquant_scale=None, key_antiquant_offset=None, value_antiquant_scale=None, "
    "value_antiquant_offset=None, key_shared_prefix=None, value_shared_prefix=None, "
    "actual_shared_prefix_len=None, query_rope=None, key_rope=None, key_rope_antiquant_scale=None, "
    "num_heads=1, scale=1.0, pre_tokens=2147483647, next_tokens=2147483647, input_layout='BSH', "
    "num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0, "
    "softmax_lse_flag=False, key_antiquant_mode=0, value_antiquant_mode=0")
# openfia's addition at the end: learnable sinks (the current aclnn interface's learnableSink).
OPENFIA_SIGNATURE = TORCH_NPU_SIGNATURE + ", sinks=None)"
TORCH_NPU_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, Tensor? atten_mask=None, "
    "SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
    "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
    "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
    "Tensor? antiquant_offset=None, Tensor? block_table=None, Tensor? query_padding_size=None, "
    "Tensor? kv_padding_size=None, Tensor? key_antiquant_scale=None, "
    "Tensor? key_antiquant_offset=None, Tensor? value_antiquant_scale=None, "
    "Tensor? value_antiquant_offset=None, Tensor? key_shared_prefix=None, "
    "Tensor? value_shared_prefix=None, Tensor? actual_shared_prefix_len=None, "
    "Tensor? query_rope=None, Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, "
    "int num_heads=1, float scale=1., int pre_tokens=2147483647, int next_tokens=2147483647, "
    "str input_layout=\"BSH\", int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, "
    "int block_size=0, int antiquant_mode=0, bool softmax_lse_flag=False, "
    "int key_antiquant_mode=0, int value_antiquant_mode=0")
OPENFIA_SCHEMA = TORCH_NPU_SCHEMA + ", Tensor? sinks=None) -> (Tensor, Tensor)"


def test_signature_matches_torch_npu():
    assert fia.__name__ + str(inspect.signature(fia)) == OPENFIA_SIGNATURE


def test_torch_ops_schema():
    op = torch.ops.openfia.npu_fused_infer_attention_score.default
    assert str(op._schema) == "openfia::npu_fused_infer_attention_score" + OPENFIA_SCHEMA
    tl = torch.ops.openfia.npu_fused_infer_attention_score.tensorlist
    assert "Tensor[] key, Tensor[] value" in str(tl._schema)


def _small():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 64, generator=g).to(torch.bfloat16)
    k = torch.randn(2, 9, 32, generator=g).to(torch.bfloat16)
    v = torch.randn(2, 9, 32, generator=g).to(torch.bfloat16)
    return q, k, v, dict(num_heads=4, num_key_value_heads=2, input_layout="BSH", scale=0.25)


def test_torch_ops_call_equals_function():
    q, k, v, kw = _small()
    a = fia(q, k, v, **kw)
    b = torch.ops.openfia.npu_fused_infer_attention_score(q, k, v, **kw)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


class _RecordOps(TorchDispatchMode):
    """Records the name of every operator dispatched while it is active."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_dispatch_modes_see_the_op_eager_calls_skip_it():
    """Eager calls on plain CPU tensors go to the native call directly (the dispatcher's
    argument conversion costs about as much as a short decode); a TorchDispatchMode, meta
    tensors and key lists still get the registered op, with the same result."""
    q, k, v, kw = _small()
    eager = fia(q, k, v, actual_seq_lengths_kv=torch.tensor([9, 4]), softmax_lse_flag=True, **kw)
    for key, value, name in ((k, v, "default"), ([k[:1], k[1:]], [v[:1], v[1:]], "tensorlist")):
        rec = _RecordOps()
        with rec:
            got = fia(q, key, value, actual_seq_lengths_kv=torch.tensor([9, 4]),
                      softmax_lse_flag=True, **kw)
        assert f"openfia.npu_fused_infer_attention_score.{name}" in rec.seen, rec.seen
        assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1])
    qg = q.clone().requires_grad_()
    got = fia(qg, [k[:1], k[1:]], [v[:1], v[1:]], actual_seq_lengths_kv=[9, 4],
              softmax_lse_flag=True, **kw)
    assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1])
    meta = fia(q.to("meta"), k.to("meta"), v.to("meta"), softmax_lse_flag=True, **kw)
    assert meta[0].device.type == "meta" and meta[0].shape == eager[0].shape
    assert meta[1].shape == eager[1].shape


def test_torch_compile_fullgraph_matches_eager():
    q, k, v, kw = _small()

    def f(q, k, v):
        out, lse = fia(q, k, v, actual_seq_lengths_kv=[9, 4], softmax_lse_flag=True, **kw)
        return out.float() * 2 + 1, lse

    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True, backend="eager")(q, k, v)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])
    # aot_eager traces through the fake kernel (what inductor sees) without inductor's codegen
    # time, which would dominate the smoke run on a 2-core CI machine.
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


SMOKE = tier_cases("smoke")


@pytest.mark.parametrize("case", SMOKE, ids=[c.name for c in SMOKE])
def test_fake_spec_matches_cpp_spec(case):
    """The Python fake kernel (shapes only) agrees with the C++ output spec on every case."""
    from openfia.torch_ops import TORCH_DTYPES, fia_fake_spec

    q, k, v, kw = call_kwargs(build_inputs(case))
    spec = openfia.fia_output_spec(q, k, v, **kw)
    out, dtype, lse = fia_fake_spec(q, k, v, **kw)
    assert list(out) == list(spec["attention_out_sizes"])
    assert dtype == TORCH_DTYPES[spec["attention_out_dtype"]]
    assert list(lse) == list(spec["softmax_lse_sizes"])
    # The meta kernel, as torch.compile sees it.
    def meta(t):
        if isinstance(t, torch.Tensor):
            return t.to("meta")
        if isinstance(t, list) and t and isinstance(t[0], torch.Tensor):
            return [x.to("meta") for x in t]
        return t

    kwm = {n: meta(x) for n, x in kw.items()}
    op = torch.ops.openfia.npu_fused_infer_attention_score
    op = op.tensorlist if isinstance(k, list) else op.default
    mo, ml = op(meta(q), meta(k), meta(v), **kwm)
    assert list(mo.shape) == list(spec["attention_out_sizes"]) and mo.dtype == dtype
    assert list(ml.shape) == list(spec["softmax_lse_sizes"])


def test_non_contiguous_inputs():
    q, k, v, kw = _small()
    a = fia(q, k, v, **kw)
    qn = q.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    kn = torch.empty(2, 9, 64, dtype=k.dtype)[:, :, ::2]
    kn.copy_(k)
    b = fia(qn, kn, v, **kw)
    assert torch.equal(a[0], b[0])
    c = torch.ops.openfia.npu_fused_infer_attention_score(qn, kn, v, **kw)
    assert torch.equal(a[0], c[0])


def test_lse_flag_false_returns_one_zero():
    q, k, v, kw = _small()
    out, lse = fia(q, k, v, **kw)
    assert lse.shape == (1,) and lse.dtype == torch.float32 and lse.item() == 0


def test_tensorlist_equals_padded_tensor():
    q, k, v, kw = _small()
    lens = [9, 4]
    a = fia(q, k, v, actual_seq_lengths_kv=lens, **kw)
    b = fia(q, [k[0:1], k[1:2, :4]], [v[0:1], v[1:2, :4]], actual_seq_lengths_kv=lens, **kw)
    assert torch.equal(a[0], b[0])


# ---- errors: openfia.OpenfiaError (a ValueError) with the C++ message ----

def _expect_error(argument, q, k, v, **kw):
    with pytest.raises(openfia.OpenfiaError) as ei:
        fia(q, k, v, **kw)
    e = ei.value
    assert isinstance(e, ValueError)
    # The message is exactly the C++ openfia::Error::what().
    expected = f"npu_fused_infer_attention_score: argument '{e.argument}': {e.rule}"
    if e.actual:
        expected += f" (got {e.actual})"
    assert str(e) == expected
    accepted = argument if isinstance(argument, tuple) else (argument,)
    assert e.argument in accepted, str(e)
    return e


def test_error_layout():
    q, k, v, kw = _small()
    kw["input_layout"] = "SBH"
    _expect_error("input_layout", q, k, v, **kw)


def test_error_num_heads():
    q = torch.zeros(1, 4, 3, 16, dtype=torch.bfloat16)
    _expect_error(("num_heads", "query"), q, q, q, num_heads=2, input_layout="BNSD")


def test_error_query_dtype():
    q, k, v, kw = _small()
    _expect_error("query", q.to(torch.int64), k, v, **kw)


@pytest.mark.parametrize("dt,word", [(torch.float64, "float64"), (torch.int16, "int16"),
                                     (torch.complex64, "complex64")])
def test_error_dtype_without_openfia_equivalent_names_argument_and_dtype(dt, word):
    q, k, v, kw = _small()
    with pytest.raises(ValueError, match=f"argument 'key': dtype {word} is not supported"):
        fia(q, k.to(dt), v, **kw)


def test_error_sparse_mode():
    q, k, v, kw = _small()
    _expect_error("sparse_mode", q, k, v, sparse_mode=5, **kw)


def test_error_inner_precise():
    q, k, v, kw = _small()
    _expect_error("inner_precise", q, k, v, inner_precise=7, **kw)


def test_error_actual_seq_lengths_kv():
    q, k, v, kw = _small()
    _expect_error("actual_seq_lengths_kv", q, k, v, actual_seq_lengths_kv=[10, 3], **kw)


def test_error_atten_mask_shape():
    q, k, v, kw = _small()
    _expect_error("atten_mask", q, k, v, atten_mask=torch.zeros(3, 3, dtype=torch.bool), **kw)


def test_error_antiquant_mode():
    q, _, _, kw = _small()
    k8 = torch.zeros(2, 9, 32, dtype=torch.int8)
    s = torch.ones(1, 32, dtype=torch.bfloat16)
    _expect_error("key_antiquant_mode", q[:, :1], k8, k8, key_antiquant_scale=s,
                  value_antiquant_scale=s, key_antiquant_mode=9, value_antiquant_mode=9, **kw)


@pytest.mark.parametrize("bad_id", [4, 1000, -2])
def test_block_table_id_past_cache_raises(bad_id):
    """block ids past the cache (or negative where a block is needed) raise, never crash."""
    q = torch.randn(2, 1, 64).to(torch.bfloat16)
    cache = torch.randn(4, 16, 32).to(torch.bfloat16)
    bt = torch.tensor([[0, 1], [2, bad_id]], dtype=torch.int32)
    _expect_error("block_table", q, cache, cache, block_table=bt, block_size=16,
                  actual_seq_lengths_kv=[20, 30], num_heads=4, num_key_value_heads=2,
                  input_layout="BSH")


def test_binding_rejects_unknown_layout_objects():
    q, k, v, kw = _small()
    with pytest.raises((ValueError, TypeError, RuntimeError)):  # the torch dispatcher's check
        fia(q, k, "not a tensor", **kw)


# ---- runtime settings ----

def test_runtime_settings():
    assert openfia.version() == openfia.__version__ and openfia.version()
    assert isinstance(openfia.simd_target(), str) and openfia.simd_target()
    prev = openfia.get_impl()
    for impl in ("ref", "engine", "auto"):
        openfia.set_impl(impl)
        assert openfia.get_impl() == impl
    openfia.set_impl(prev)
    with pytest.raises(ValueError):
        openfia.set_impl("fast")
    n = openfia.get_num_threads()
    openfia.set_num_threads(2)
    assert openfia.get_num_threads() == 2
    openfia.set_num_threads(n)
    with pytest.raises(openfia.OpenfiaError):
        openfia.set_num_threads(0)


def test_patch_torch_npu():
    """Ascend code runs unchanged: `import torch_npu` after openfia.patch_torch_npu()."""
    code = (
        "import torch, openfia\n"
        "openfia.patch_torch_npu()\n"
        "import torch_npu\n"
        "q = torch.randn(1, 2, 3, 16).to(torch.bfloat16)\n"
        "a = torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout='BNSD')\n"
        "b = torch.ops.npu.npu_fused_infer_attention_score(q, q, q, num_heads=2,"
        " input_layout='BNSD')\n"
        "c = openfia.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout='BNSD')\n"
        "assert torch.equal(a[0], c[0]) and torch.equal(b[0], c[0])\n"
        "print('ok')\n")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_patch_torch_npu_other_ops():
    """patch_torch_npu() also serves npu_kv_quant_sparse_flash_attention (torch_npu.* and
    torch.ops.npu.*) and SparseAttnSharedkv(Metadata) (torch_npu.* and torch.ops.custom.*, where
    DeepSeek-V4 calls them); each upstream name gives exactly openfia's result."""
    code = (
        "import torch, openfia\n"
        "from openfia import kvqsfa as K\n"
        "openfia.patch_torch_npu()\n"
        "openfia.patch_torch_npu()  # idempotent\n"
        "import torch_npu\n"
        "g = torch.Generator().manual_seed(0)\n"
        # KvQuantSparseFlashAttention: BSND, int8 rows.
        "q = torch.randn(1, 2, 2, 576, generator=g).to(torch.bfloat16)\n"
        "rows = K.quantize_kv_rows(torch.randn(1, 8, 1, 512, generator=g),\n"
        "                          torch.randn(1, 8, 1, 64, generator=g).to(torch.bfloat16))\n"
        "idx = torch.tensor([[[[0, 2, 5, -1]], [[1, 7, -1, -1]]]], dtype=torch.int32)\n"
        "kw = dict(attention_mode=2)\n"
        "want = openfia.npu_kv_quant_sparse_flash_attention(q, rows, rows, idx, 0.04, 2, 2, **kw)\n"
        "a = torch_npu.npu_kv_quant_sparse_flash_attention(q, rows, rows, idx, 0.04, 2, 2, **kw)\n"
        "b = torch.ops.npu.npu_kv_quant_sparse_flash_attention(q, rows, rows, idx, 0.04, 2, 2,\n"
        "                                                      **kw)\n"
        "assert torch.equal(a, want) and torch.equal(b, want) and want.abs().sum() > 0\n"
        # SparseAttnSharedkv: TND, window-only (no cmp cache), 2 batches, paged ori cache.
        "n1, d, bs = 8, 64, 16\n"
        "cu = torch.tensor([0, 3, 5], dtype=torch.int32)\n"
        "s2 = torch.tensor([20, 9], dtype=torch.int32)\n"
        "qs = torch.randn(5, n1, d, generator=g).to(torch.bfloat16)\n"
        "cache = torch.randn(4, bs, 1, d, generator=g).to(torch.bfloat16)\n"
        "bt = torch.tensor([[0, 2], [3, -1]], dtype=torch.int32)\n"
        "sinks = torch.randn(n1, generator=g)\n"
        "mk = dict(cu_seqlens_q=cu, seqused_kv=s2, batch_size=2, max_seqlen_q=3,\n"
        "          max_seqlen_kv=20, layout_q='TND', has_cmp_kv=False)\n"
        "meta = openfia.npu_sparse_attn_sharedkv_metadata(n1, 1, d, **mk)\n"
        "for f in (torch_npu.npu_sparse_attn_sharedkv_metadata,\n"
        "          torch.ops.custom.npu_sparse_attn_sharedkv_metadata):\n"
        "    m = f(n1, 1, d, **mk)\n"
        "    assert m.dtype == torch.int32 and torch.equal(m, meta)\n"
        "sk = dict(ori_kv=cache, ori_block_table=bt, cu_seqlens_q=cu, seqused_kv=s2,\n"
        "          sinks=sinks, metadata=meta, layout_q='TND', return_softmax_lse=True)\n"
        "want = openfia.npu_sparse_attn_sharedkv(qs, **sk)\n"
        "for f in (torch_npu.npu_sparse_attn_sharedkv,\n"
        "          torch.ops.custom.npu_sparse_attn_sharedkv):\n"
        "    out, lse = f(qs, **sk)\n"
        "    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])\n"
        "assert want[0].abs().sum() > 0 and list(want[1].shape) == [1, 5, n1]\n"
        # The custom op traces under torch.compile through its fake kernels.
        "def fn(qs):\n"
        "    m = torch.ops.custom.npu_sparse_attn_sharedkv_metadata(n1, 1, d, **mk)\n"
        "    out, lse = torch.ops.custom.npu_sparse_attn_sharedkv(qs, **{**sk, 'metadata': m})\n"
        "    return out.float() * 2, lse\n"
        "c = torch.compile(fn, fullgraph=True, backend='eager')(qs)\n"
        "assert torch.equal(c[0], want[0].float() * 2) and torch.equal(c[1], want[1])\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ), timeout=180)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_sas_torch_ops_schema_and_fake():
    """torch.ops.openfia.npu_sparse_attn_sharedkv(_metadata): the fake kernels give the shapes
    the C++ output spec gives (BSND with lse, TND without)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = torch.ops.openfia.npu_sparse_attn_sharedkv.default
    assert "Tensor? metadata=None" in str(op._schema)
    assert str(op._schema).endswith("-> (Tensor, Tensor)")
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 8, 64, generator=g).to(torch.bfloat16)
    cache = torch.randn(4, 16, 1, 64, generator=g).to(torch.bfloat16)
    bt = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    s2 = torch.tensor([20, 9], dtype=torch.int32)
    for lse_flag in (True, False):
        kw = dict(ori_kv=cache, ori_block_table=bt, seqused_kv=s2, return_softmax_lse=lse_flag)
        out, lse = op(q, **kw)
        with FakeTensorMode() as mode:
            fo, fl = op(mode.from_tensor(q), **{k: mode.from_tensor(v) if torch.is_tensor(v)
                                               else v for k, v in kw.items()})
        assert fo.shape == out.shape and fo.dtype == out.dtype
        assert fl.shape == lse.shape and fl.dtype == lse.dtype == torch.float32
    meta = torch.ops.openfia.npu_sparse_attn_sharedkv_metadata(
        8, 1, 64, seqused_kv=s2, batch_size=2, max_seqlen_q=3, max_seqlen_kv=20,
        has_cmp_kv=False)
    assert meta.shape == (1024,) and meta.dtype == torch.int32


def test_sas_functions_compile_fullgraph_and_take_meta_tensors():
    """openfia.npu_sparse_attn_sharedkv(_metadata) (also torch_npu's after patch_torch_npu) are
    the registered ops under torch.compile and for meta tensors; eager CPU calls stay native."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 3, 4, 16, generator=g)
    ori = torch.randn(4, 16, 1, 16, generator=g)
    bt = torch.arange(4, dtype=torch.int32).reshape(1, 4)
    s2 = torch.tensor([40], dtype=torch.int32)

    def f(q, ori, bt, s2):
        md = openfia.npu_sparse_attn_sharedkv_metadata(
            4, 1, 16, seqused_kv=s2, batch_size=1, max_seqlen_q=3, max_seqlen_kv=40,
            has_cmp_kv=False)
        out, lse = openfia.npu_sparse_attn_sharedkv(q, ori_kv=ori, ori_block_table=bt,
                                                    seqused_kv=s2, metadata=md,
                                                    return_softmax_lse=True)
        return out * 2, lse

    eager = f(q, ori, bt, s2)
    compiled = torch.compile(f, fullgraph=True)(q, ori, bt, s2)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
    out, lse = openfia.npu_sparse_attn_sharedkv(
        q.to("meta"), ori_kv=ori.to("meta"), ori_block_table=bt.to("meta"),
        seqused_kv=s2.to("meta"), return_softmax_lse=True)
    assert out.device.type == "meta" and out.shape == q.shape
    assert lse.shape == eager[1].shape


SEED_EXAMPLES = os.path.join(os.path.dirname(__file__), "seed_examples")


def _run_openfia(*args):
    return subprocess.run([sys.executable, "-m", "openfia", *args], capture_output=True,
                          text=True, timeout=300, cwd=SEED_EXAMPLES)


def test_seed_examples_run_unchanged():
    """The source document's two FIA examples (single operator; graph mode through torchair's
    npu_backend under torch.compile(fullgraph=True)), verbatim, run on the CPU under
    `python -m openfia run`: .npu(), torch_npu and torchair come from the stand-ins."""
    r = _run_openfia("run", "fia_single_op.py")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dtype=torch.float16" in r.stdout
    r = _run_openfia("run", "fia_graph_mode.py")
    assert r.returncode == 0, r.stderr[-3000:]
    single, graph = r.stdout.split("graph output with mask:")
    single = single.split("single op output with mask:")[1]
    # The compiled graph ran the same operator: the same tensor, printed the same way.
    assert single.strip() == graph.strip() and "torch.Size([1, 8, 164, 128])" in graph


def test_npu_device_strings_map_to_cpu(tmp_path):
    """Without a real torch_npu, "npu" device strings in a script mean the CPU: torch.device
    parses them and tensors made or moved there land on the CPU (factories, Tensor.to in every
    form, Module.to, set_default_device, under torch.compile too); seeding torch.npu seeds the
    CPU generator without torch's "seed does not take effect" warning; another thread maps
    inside NpuDeviceMode."""
    code = (
        "import threading, warnings, torch, openfia\n"
        "openfia.patch_torch_npu()\n"
        "openfia.patch_torch_npu()  # idempotent: one mode\n"
        "import torch_npu, torchair\n"
        "from openfia import npu_shim\n"
        "d = torch.device('npu:0')\n"
        "assert d.type == 'npu' and d.index == 0\n"
        "x = torch.randn(4, 8, device='npu')\n"
        "assert x.device.type == 'cpu' and not x.is_npu\n"
        "assert x.to('npu:0').device.type == 'cpu' and x.to(d, torch.float16).dtype == torch.float16\n"
        "assert x.to(device='npu').device.type == 'cpu' and x.to(0).device.type == 'cpu'\n"
        "assert x.to(torch.float16).dtype == torch.float16 and x.to('npu', non_blocking=True) is x\n"
        "assert torch.tensor([1.0], device=torch.device('npu', 1)).device.type == 'cpu'\n"
        "assert torch.zeros_like(x, device='npu').device.type == 'cpu'\n"
        "assert x.new_empty(3, device='npu:0').device.type == 'cpu'\n"
        "assert torch.zeros(2, device=0).device.type == 'cpu'\n"
        "assert torch.nn.Linear(8, 2).to('npu').weight.device.type == 'cpu'\n"
        "torch.npu.manual_seed(3); a = torch.rand(2)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    torch.manual_seed(3); b = torch.rand(2)\n"
        "assert torch.equal(a, b) and not w, [str(m.message) for m in w]\n"
        "torch.set_default_device('npu')\n"
        "assert torch.ones(2).device.type == 'cpu'\n"
        "torch.set_default_device('cpu')\n"
        "f = torch.compile(lambda t: t.to('npu') * 2 + torch.ones(8, device='npu'),\n"
        "                  fullgraph=True, backend=torchair.get_npu_backend())\n"
        "assert torch.equal(f(x), x * 2 + 1)\n"
        "q = torch.randn(1, 2, 1, 16, dtype=torch.float16, device='npu:0')\n"
        "k = torch.randn(1, 2, 5, 16, dtype=torch.float16).to('npu')\n"
        "out = torch_npu.npu_fused_infer_attention_score(q, k, k, num_heads=2,\n"
        "                                                input_layout='BNSD')[0]\n"
        "assert out.shape == (1, 2, 1, 16) and out.device.type == 'cpu'\n"
        "seen = []\n"
        "def work():\n"
        "    with npu_shim.NpuDeviceMode():\n"
        "        seen.append(torch.ones(1, device='npu').device.type)\n"
        "t = threading.Thread(target=work); t.start(); t.join()\n"
        "assert seen == ['cpu'], seen\n"
        "print('mapped')\n")
    path = tmp_path / "npu_devices.py"
    path.write_text(code)
    r = _run_openfia("run", str(path))
    assert r.returncode == 0 and r.stdout.strip() == "mapped", r.stderr[-3000:]


def test_npu_stand_ins_and_runner_usage(tmp_path):
    code = (
        "import sys, torch, openfia\n"
        "openfia.patch_torch_npu()\n"
        "import torch_npu, torchair\n"
        "from torchair.configs.compiler_config import CompilerConfig\n"
        "x = torch.ones(2)\n"
        "assert x.npu() is x and x.npu('npu:0', non_blocking=True) is x\n"
        "assert not torch.npu.is_available() and torch.npu.device_count() == 0\n"
        "assert torch_npu.npu is torch.npu\n"
        "torch.npu.synchronize(); torch.npu.set_device(0)\n"
        "c = CompilerConfig(); c.experimental_config.frozen_parameter = True\n"
        "assert c.experimental_config.frozen_parameter is True\n"
        "f = torch.compile(lambda a: a * 2, backend=torchair.get_npu_backend(compiler_config=c))\n"
        "assert torch.equal(f(x), x * 2)\n"
        "print(sys.argv[1:])\n")
    path = tmp_path / "stand_in_check.py"
    path.write_text(code)
    r = _run_openfia("run", str(path), "--flag", "7")
    assert r.returncode == 0 and r.stdout.strip() == "['--flag', '7']", r.stderr[-3000:]
    r = _run_openfia()
    assert r.returncode == 2 and "usage: python -m openfia run" in r.stderr
