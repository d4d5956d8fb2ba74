"""The guarantees of docs/guarantees.md seen from Python: index tensors read once (a thread
rewriting a block table during calls gets a consistent result or a clear error, never a crash),
fork safety with bitwise-equal results, errors that reach every rank of a ring, bounded memory,
checked settings, and every bad argument named (ints beyond int64, tensors on other devices,
numpy arrays, silent coercions, no memory or threads).

Calls that could crash or hang run in child processes (this file is also their entry point)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import openfia
from openfia import kvqsfa as K

HERE = os.path.dirname(os.path.abspath(__file__))
BF16 = torch.bfloat16


def run_child(*args, env=None, timeout=180):
    """This file run as a script with `args`; returns the CompletedProcess."""
    e = dict(os.environ, OPENFIA_NUM_THREADS="2", PYTHONPATH=HERE)
    e.update(env or {})
    for k, v in list(e.items()):
        if v is None:
            del e[k]
    return subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=e,
                          capture_output=True, text=True, timeout=timeout)


def expect_child_ok(r):
    assert r.returncode == 0, (f"child exited {r.returncode}" +
                               (f" (signal {-r.returncode})" if r.returncode < 0 else "") +
                               f"\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-4000:]}")
    return r.stdout


# ---- calls with two equivalent block tables -----------------------------------------------------
#
# Every cache is stored twice: copy A in blocks [0, n) and copy B in blocks [n, 2n). Table A
# addresses copy A, table B copy B, so any mixture of their entries (a table caught half
# rewritten) addresses the same tokens: the result is the same bit for bit.

def kvqsfa_call():
    g = torch.Generator().manual_seed(0)
    B, S1, N, S2, bs, topk = 2, 4, 16, 512, 16, 128
    q = torch.randn(B, S1, N, 576, generator=g).to(BF16)
    rows = K.quantize_kv_rows(torch.randn(B * S2, 512, generator=g),
                              torch.randn(B * S2, 64, generator=g).to(BF16), "int8")
    n = B * S2 // bs
    pool = torch.cat([rows, rows]).view(2 * n, bs, 1, 656)
    table_a = torch.arange(n, dtype=torch.int32).view(B, S2 // bs)
    idx = torch.randint(0, S2, (B, S1, 1, topk), generator=g, dtype=torch.int32)
    lens = torch.tensor([S2, S2 - 100], dtype=torch.int32)
    tables = {"block_table": (table_a, table_a + n)}

    def call(t):
        return openfia.npu_kv_quant_sparse_flash_attention(
            q, pool, pool, idx, 576 ** -0.5, 2, 2, attention_mode=2, layout_kv="PA_BSND",
            block_table=t["block_table"], actual_seq_lengths_kv=lens, sparse_mode=0)
    return call, tables, {"sparse_indices": idx, "actual_seq_lengths_kv": lens}


def sas_call():
    g = torch.Generator().manual_seed(1)
    B, S1, N, D, S2, bs1, bs2, ratio, k2 = 2, 2, 8, 64, 640, 16, 8, 4, 32
    q = torch.randn(B, S1, N, D, generator=g).to(BF16)
    ori = torch.randn(B * S2, D, generator=g).to(BF16)
    cmp = torch.randn(B * S2 // ratio, D, generator=g).to(BF16)
    n1, n2 = B * S2 // bs1, B * (S2 // ratio) // bs2
    ori_kv = torch.cat([ori, ori]).view(2 * n1, bs1, 1, D)
    cmp_kv = torch.cat([cmp, cmp]).view(2 * n2, bs2, 1, D)
    ori_a = torch.arange(n1, dtype=torch.int32).view(B, -1)
    cmp_a = torch.arange(n2, dtype=torch.int32).view(B, -1)
    idx = torch.randint(0, S2 // ratio // 2, (B, S1, 1, k2), generator=g, dtype=torch.int32)
    seqused = torch.tensor([S2, S2], dtype=torch.int32)
    sinks = torch.randn(N, generator=g)
    tables = {"ori_block_table": (ori_a, ori_a + n1), "cmp_block_table": (cmp_a, cmp_a + n2)}

    def call(t):
        return openfia.npu_sparse_attn_sharedkv(
            q, ori_kv=ori_kv, cmp_kv=cmp_kv, cmp_sparse_indices=idx,
            ori_block_table=t["ori_block_table"], cmp_block_table=t["cmp_block_table"],
            seqused_kv=seqused, sinks=sinks, cmp_ratio=ratio, return_softmax_lse=True)
    return call, tables, {"cmp_sparse_indices": idx, "seqused_kv": seqused}


def fia_call():
    g = torch.Generator().manual_seed(2)
    B, N, KVN, D, S2, bs = 2, 8, 2, 64, 1024, 128
    q = torch.randn(B, 1, N * D, generator=g).to(BF16)
    rows = torch.randn(B * S2, KVN * D, generator=g).to(BF16)
    n = B * S2 // bs
    cache = torch.cat([rows, rows]).view(2 * n, bs, KVN * D)
    table_a = torch.arange(n, dtype=torch.int32).view(B, S2 // bs)
    tables = {"block_table": (table_a, table_a + n)}

    def call(t):
        return openfia.npu_fused_infer_attention_score(
            q, cache, cache, num_heads=N, num_key_value_heads=KVN, input_layout="BSH",
            scale=D ** -0.5, block_table=t["block_table"], block_size=bs,
            actual_seq_lengths_kv=[S2, S2 - 300], softmax_lse_flag=True)
    return call, tables, {}


CALLS = {"kvqsfa": kvqsfa_call, "sas": sas_call, "fia": fia_call}
BAD_IDS = (2**31 - 1, -7, 1 << 20, -(2**31))


def race(op, mode, seconds):
    """Child role: a thread rewrites the op's index tensors in place while this thread calls the
    op. mode "valid": the tables flip between two equivalent ones, row by row; every result must
    equal the undisturbed one bit for bit. mode "invalid": the tables' rows flip between valid
    ids and ids far outside the cache; mode "garbage": so do the other index tensors (lengths,
    sparse indices). Every call must give the undisturbed result ("invalid") or some result
    ("garbage"), or an OpenfiaError naming one of the tensors being rewritten. A crash ends the
    child with a signal."""
    call, tables, others = CALLS[op]()
    live = {name: pair[0].clone() for name, pair in tables.items()}
    want = call(live)
    want = want if isinstance(want, tuple) else (want,)
    saved = {name: t.clone() for name, t in others.items()}
    stop = threading.Event()

    def rewrite():
        i = 0
        while not stop.is_set():
            i += 1
            for name, (a, b) in tables.items():
                t = live[name]
                for r in range(t.shape[0]):
                    if mode == "valid":
                        t[r].copy_((a if i % 2 else b)[r])
                    else:
                        t[r].copy_(a[r] if i % 2 else torch.full_like(a[r], BAD_IDS[i % 4]))
            if mode == "garbage":
                for name, t in others.items():
                    t.copy_(saved[name] if i % 2 else torch.full_like(t, BAD_IDS[i % 4]))

    th = threading.Thread(target=rewrite)
    th.start()
    calls = errors = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                got = call(live)
            except openfia.OpenfiaError as e:
                assert mode != "valid", f"valid tables only, yet: {e}"
                assert e.argument in set(tables) | set(others), str(e)
                errors += 1
                continue
            got = got if isinstance(got, tuple) else (got,)
            calls += 1
            if mode != "garbage":
                assert all(torch.equal(x, y) for x, y in zip(got, want)), "result changed"
    finally:
        stop.set()
        th.join()
    print(f"{op} {mode}: {calls} results, {errors} errors")


@pytest.mark.parametrize("mode", ["valid", "invalid", "garbage"])
@pytest.mark.parametrize("op", sorted(CALLS))
def test_rewriting_index_tensors_during_calls_never_crashes(op, mode):
    out = expect_child_ok(run_child("race", op, mode, "3"))
    assert "results" in out


# ---- fork -----------------------------------------------------------------------------------------

_FORK_CALL = None  # the kvqsfa call, made in the parent and inherited by forked workers


def fork_child_script():
    """Child role: start the pool (2 threads), then fork with os.fork() and with
    multiprocessing's fork start method; each child's results must be bitwise the parent's.
    (torch itself runs single-threaded here: its OpenMP pool hangs in forked children, as
    PyTorch documents; the children call only openfia.)"""
    import multiprocessing as mp

    global _FORK_CALL
    torch.set_num_threads(1)
    call, tables, _ = CALLS["sas"]()
    live = {name: pair[0] for name, pair in tables.items()}
    want = call(live)
    kcall, ktables, _ = CALLS["kvqsfa"]()
    _FORK_CALL = lambda: kcall({"block_table": ktables["block_table"][0]})  # noqa: E731
    want_k = _FORK_CALL()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ok = False
        try:
            got = call(live)
            ok = all(torch.equal(x, y) for x, y in zip(got, want))
        finally:
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1", "os.fork child: results differ"
    with mp.get_context("fork").Pool(2) as pool:
        outs = pool.map(_kvqsfa_in_worker, range(4))
    assert all(torch.equal(o, want_k) for o in outs), "multiprocessing fork: results differ"
    print("fork ok")


def _kvqsfa_in_worker(_):
    return _FORK_CALL()


def test_forked_children_compute_with_the_parents_results():
    # A child that hangs on the pool it inherited would hit the timeout.
    assert "fork ok" in expect_child_ok(run_child("fork", timeout=120))


# ---- ring: an exception on one rank reaches every rank -------------------------------------------

class _Boom(RuntimeError):
    """An exception type only this module knows (pickled by reference to every rank)."""


def _ring_worker(rank, world, tmp, where, kind):
    """One rank: rank `world - 1` raises `kind` (during the up-front check or during the ring);
    every rank must raise promptly, the same type with the same attributes."""
    import datetime

    import torch.distributed as dist

    from openfia import ring

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    openfia.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rdv", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    bad = rank == world - 1
    fia = openfia.npu_fused_infer_attention_score
    calls = [0]

    def failing_fia(*a, **kw):
        calls[0] += 1
        if bad and (where != "ring" or calls[0] == 2):  # the ring: at its second step
            if kind == "openfia":
                raise openfia._native.error("npu_fused_infer_attention_score", "block_table",
                                            "a rule", "a value")
            raise {"memory": MemoryError, "runtime": _Boom}[kind]("injected on the last rank")
        return fia(*a, **kw)

    if where == "check":
        from openfia import fia as fia_mod
        real_spec = fia_mod.fia_output_spec
        fia_mod.fia_output_spec = lambda *a, **kw: (failing_fia(*a, **kw), real_spec(*a, **kw))[1]
    import openfia.fia as fm
    fm.npu_fused_infer_attention_score = failing_fia
    q = torch.randn(1, 4, 2, 8)
    res = {}
    t0 = time.monotonic()
    try:
        (ring.sharded_kv_attention if where == "sharded" else ring.ring_attention)(
            q, q, q, num_heads=2, input_layout="BSND")
        res["raised"] = None
    except Exception as e:  # noqa: BLE001 - reported to the test
        res["raised"] = (type(e).__name__, str(e), getattr(e, "argument", None),
                         getattr(e, "code", None))
    res["seconds"] = time.monotonic() - t0
    torch.save(res, f"{tmp}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("where,kind", [("check", "memory"), ("ring", "runtime"),
                                        ("ring", "openfia"), ("sharded", "runtime")])
def test_an_exception_on_one_rank_reaches_every_rank(where, kind, tmp_path):
    import torch.multiprocessing as mp

    world = 3
    mp.spawn(_ring_worker, args=(world, str(tmp_path), where, kind), nprocs=world, join=True)
    want = {"memory": "MemoryError", "runtime": "_Boom", "openfia": "OpenfiaError"}[kind]
    for r in range(world):
        res = torch.load(tmp_path / f"rank{r}.pt")
        assert res["raised"] is not None, f"rank {r} returned"
        name, msg, argument, code = res["raised"]
        assert name == want, (r, res)
        assert "injected" in msg or argument == "block_table", (r, res)
        if kind == "openfia":
            assert argument == "block_table" and code == "invalid_argument", (r, res)
        assert (r == world - 1) == (f"rank {world - 1} of {world}" not in msg), (r, msg)
        assert res["seconds"] < 30, f"rank {r} waited {res['seconds']:.0f} s"


# ---- settings -------------------------------------------------------------------------------------

def settings_child(var):
    """Child role: the first use of the settings with an invalid variable must raise an
    OpenfiaError naming it; a setter then replaces it."""
    get = {"OPENFIA_NUM_THREADS": openfia.get_num_threads, "OPENFIA_SIMD": openfia.simd_target,
           "OPENFIA_IMPL": openfia.get_impl, "OPENFIA_NPU_STRICT": openfia.get_npu_strict}[var]
    try:
        get()
    except openfia.OpenfiaError as e:
        assert e.argument == var, str(e)
        print("raised:", e)
    else:
        raise AssertionError(f"{var}={os.environ[var]!r} accepted")


@pytest.mark.parametrize("var,value", [
    ("OPENFIA_NUM_THREADS", "3.7"), ("OPENFIA_NUM_THREADS", "4294967297"),
    ("OPENFIA_NUM_THREADS", "100000"), ("OPENFIA_NUM_THREADS", "-2"),
    ("OPENFIA_SIMD", "bogus"), ("OPENFIA_IMPL", "bogus"), ("OPENFIA_NPU_STRICT", "yes"),
    ("OPENFIA_NPU_STRICT", "2")])
def test_invalid_environment_variables_are_errors_naming_them(var, value):
    out = expect_child_ok(run_child("settings", var, env={var: value}))
    assert value in out and "must be" in out


def test_setters_reject_values_outside_their_sets():
    n = openfia.get_num_threads()
    for bad in (0, 100000, 2**70):
        rule = r"\[1, 1024\]" if bad < 2**63 else None  # beyond int64: the int64 rule
        with pytest.raises(openfia.OpenfiaError, match=rule) as e:
            openfia.set_num_threads(bad)
        assert e.value.argument == "n"
    with pytest.raises(openfia.OpenfiaTypeError):
        openfia.set_num_threads(3.7)
    assert openfia.get_num_threads() == n
    target = openfia.simd_target()
    with pytest.raises(openfia.OpenfiaError, match="avx512bf16") as e:
        openfia.set_simd_cap("bogus")
    assert e.value.argument == "target" and openfia.simd_target() == target
    with pytest.raises(openfia.OpenfiaError) as e:
        openfia.set_impl("fast")
    assert e.value.argument == "impl"


def test_info_shows_an_invalid_variable_instead_of_failing():
    r = subprocess.run([sys.executable, "-m", "openfia", "info"], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, OPENFIA_SIMD="bogus",
                                             OPENFIA_NUM_THREADS="3.7"))
    assert r.returncode == 0, r.stderr
    assert "SIMD target in use: none:" in r.stdout and "'OPENFIA_SIMD'" in r.stdout
    assert "threads: none:" in r.stdout and "'OPENFIA_NUM_THREADS'" in r.stdout


def test_the_cli_lists_the_simd_names_the_library_takes():
    from openfia import _cli

    assert set(_cli.SIMD_TARGETS) | {"best"} == set(openfia._openfia.simd_cap_names())


# ---- resources: memory and threads ------------------------------------------------------------------

def resource_child(what):
    """Child role under an address-space limit: a call needing more memory than is left, or a
    thread count the system cannot start, is an OpenfiaResourceError (also a MemoryError)
    naming what was asked for."""
    import resource

    with open("/proc/self/status") as f:
        vm = next(int(x.split()[1]) for x in f if x.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
    if what == "memory":
        # Every query row attends all 2^21 original tokens (ori_mask_mode 0): the key lists
        # alone are 256 rows x 2^21 entries x 5 bytes, 2.5 GiB, for 8 MiB of inputs.
        s2 = 1 << 21
        q = torch.randn(1, 256, 1, 1)
        ori = torch.randn(1, s2, 1, 1)
        call = lambda: openfia.npu_sparse_attn_sharedkv(  # noqa: E731
            q, ori_kv=ori, ori_block_table=torch.zeros(1, 1, dtype=torch.int32),
            seqused_kv=torch.tensor([s2], dtype=torch.int32), ori_mask_mode=0)
    else:
        openfia.set_num_threads(200)  # 199 stacks of 8 MiB do not fit in 256 MiB
        call = lambda: CALLS["kvqsfa"]()[0]({"block_table": CALLS["kvqsfa"]()[1]["block_table"][0]})  # noqa: E731,E501
    try:
        call()
    except openfia.OpenfiaResourceError as e:
        assert isinstance(e, MemoryError) and isinstance(e, openfia.OpenfiaError)
        assert e.code == "resource_exhausted", e.code
        print("raised:", e)
    else:
        raise AssertionError("no error")


@pytest.mark.parametrize("what,named", [("memory", "bytes"), ("threads", "200 threads")])
def test_no_memory_or_threads_is_an_error_naming_the_size(what, named):
    out = expect_child_ok(run_child("resource", what))
    assert named in out and "npu_" in out


def test_metadata_plan_is_bounded_by_the_tensors_not_scalars():
    t0 = time.monotonic()
    with pytest.raises(openfia.OpenfiaError, match="4194304") as e:
        openfia.npu_sparse_attn_sharedkv_metadata(64, 1, 512, batch_size=10**6, max_seqlen_q=1024,
                                                  max_seqlen_kv=4096, cmp_topk=512, cmp_ratio=4)
    assert e.value.argument == "max_seqlen_q" and time.monotonic() - t0 < 5
    with pytest.raises(openfia.OpenfiaError, match="4194304") as e:
        openfia.npu_sparse_attn_sharedkv_metadata(
            64, 1, 512, cu_seqlens_q=torch.tensor([0, 2**30], dtype=torch.int32),
            max_seqlen_kv=4096, cmp_topk=512, cmp_ratio=4, layout_q="TND")
    assert e.value.argument == "cu_seqlens_q"


# ---- every argument named ---------------------------------------------------------------------------

def _small_kvqsfa():
    call, tables, others = kvqsfa_call()
    return call, {"block_table": tables["block_table"][0]}


def _fia_small():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 5, 64, generator=g).to(BF16)
    k = torch.randn(2, 9, 32, generator=g).to(BF16)
    return q, k, k.clone(), dict(num_heads=4, num_key_value_heads=2, input_layout="BSH")


def _sas_small(**kw):
    call, tables, _ = sas_call()
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, 8, 64, generator=g).to(BF16)
    ori = torch.randn(80, 16, 1, 64, generator=g).to(BF16)
    args = dict(ori_kv=ori, ori_block_table=torch.arange(80, dtype=torch.int32).view(2, 40),
                seqused_kv=torch.tensor([600, 600], dtype=torch.int32))
    args.update(kw)
    return q, args


def _kvq_small():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 2, 576, generator=g).to(BF16)
    rows = K.quantize_kv_rows(torch.randn(32, 512, generator=g),
                              torch.randn(32, 64, generator=g).to(BF16), "int8")
    key = rows.view(1, 32, 1, 656)
    idx = torch.randint(0, 32, (1, 2, 1, 8), generator=g, dtype=torch.int32)
    return q, key, idx


def _expect(exc, argument, f, *a, **kw):
    with pytest.raises(exc) as e:
        f(*a, **kw)
    assert getattr(e.value, "argument", None) == argument, str(e.value)
    assert len(str(e.value)) < 400, "the message must not dump tensors"
    return e.value


def test_integers_beyond_int64_are_named():
    fia = openfia.npu_fused_infer_attention_score
    q, k, v, kw = _fia_small()
    _expect(openfia.OpenfiaError, "num_heads", fia, q, k, v, **dict(kw, num_heads=2**64))
    _expect(openfia.OpenfiaError, "pre_tokens", fia, q, k, v, pre_tokens=-(2**70), **kw)
    _expect(openfia.OpenfiaError, "actual_seq_lengths_kv", fia, q, k, v,
            actual_seq_lengths_kv=[9, 2**64], **kw)
    qk, key, idx = _kvq_small()
    _expect(openfia.OpenfiaError, "pre_tokens", openfia.npu_kv_quant_sparse_flash_attention,
            qk, key, key, idx, 0.04, 2, 2, attention_mode=2, pre_tokens=2**63)
    q, args = _sas_small()
    _expect(openfia.OpenfiaError, "ori_win_left", openfia.npu_sparse_attn_sharedkv, q,
            **dict(args, ori_win_left=2**64))
    _expect(openfia.OpenfiaError, "num_heads_q", openfia.npu_sparse_attn_sharedkv_metadata,
            2**64, 1, 64, batch_size=1, max_seqlen_q=1)
    _expect(openfia.OpenfiaError, "cmp_ratio", openfia.npu_sparse_attn_sharedkv_metadata,
            8, 1, 64, batch_size=1, max_seqlen_q=1, cmp_ratio=2**70)
    # The native module itself names them too (no std::bad_cast).
    _expect(openfia.OpenfiaError, "tile_size", openfia._openfia.kvqsfa_output_spec,
            query=qk, key=key, value=key, sparse_indices=idx, tile_size=2**64)


def test_silent_coercions_are_rejected():
    fia = openfia.npu_fused_infer_attention_score
    q, k, v, kw = _fia_small()
    _expect(openfia.OpenfiaTypeError, "num_heads", fia, q, k, v, **dict(kw, num_heads=4.9))
    _expect(openfia.OpenfiaTypeError, "num_heads", fia, q, k, v, **dict(kw, num_heads="4"))
    _expect(openfia.OpenfiaTypeError, "actual_seq_lengths_kv", fia, q, k, v,
            actual_seq_lengths_kv=torch.tensor([7.9, 9.0]), **kw)
    _expect(openfia.OpenfiaTypeError, "actual_seq_lengths_kv", fia, q, k, v,
            actual_seq_lengths_kv=["8", 9], **kw)
    _expect(openfia.OpenfiaTypeError, "softmax_lse_flag", fia, q, k, v,
            softmax_lse_flag="False", **kw)
    qk, key, idx = _kvq_small()
    kvq = openfia.npu_kv_quant_sparse_flash_attention
    _expect(openfia.OpenfiaTypeError, "actual_seq_lengths_kv", kvq, qk, key, key, idx, 0.04, 2,
            2, attention_mode=2, actual_seq_lengths_kv=[7.9])
    _expect(openfia.OpenfiaError, "actual_seq_lengths_kv", kvq, qk, key, key, idx, 0.04, 2, 2,
            attention_mode=2, actual_seq_lengths_kv=torch.tensor([7.9]))
    _expect(openfia.OpenfiaTypeError, "scale_value", kvq, qk, key, key, idx, "0.04", 2, 2,
            attention_mode=2)
    q, args = _sas_small()
    _expect(openfia.OpenfiaTypeError, "cmp_ratio", openfia.npu_sparse_attn_sharedkv, q,
            **dict(args, cmp_ratio=4.0))
    _expect(openfia.OpenfiaTypeError, "head_dim", openfia.npu_sparse_attn_sharedkv_metadata,
            8, 1, 64.5, batch_size=1, max_seqlen_q=1)


def test_numpy_inputs_are_a_type_error_naming_the_argument():
    np = pytest.importorskip("numpy")
    qk, key, idx = _kvq_small()
    kvq = openfia.npu_kv_quant_sparse_flash_attention
    e = _expect(openfia.OpenfiaTypeError, "query", kvq, qk.float().numpy(), key, key, idx, 0.04,
                2, 2, attention_mode=2)
    assert isinstance(e, TypeError) and "numpy.ndarray" in str(e)
    _expect(openfia.OpenfiaTypeError, "sparse_indices", kvq, qk, key, key, idx.numpy(), 0.04, 2,
            2, attention_mode=2)
    # Length arguments are lists of integers: a numpy array of them is taken, as a list is.
    a = kvq(qk, key, key, idx, 0.04, 2, 2, attention_mode=2,
            actual_seq_lengths_kv=np.array([20], dtype=np.int64))
    b = kvq(qk, key, key, idx, 0.04, 2, 2, attention_mode=2, actual_seq_lengths_kv=[20])
    assert torch.equal(a, b)
    q, k, v, kw = _fia_small()
    _expect(openfia.OpenfiaTypeError, "value", openfia.npu_fused_infer_attention_score, q, k,
            v.float().numpy(), **kw)


def test_tensors_on_other_devices_are_named():
    qk, key, idx = _kvq_small()
    kvq = openfia.npu_kv_quant_sparse_flash_attention
    for args, name in (((qk, key, key.to("meta"), idx), "value"),
                       ((qk, key, key, idx.to("meta")), "sparse_indices"),
                       ((qk.to("meta"), key, key, idx), "key")):
        e = _expect(openfia.OpenfiaError, name, kvq, *args, 0.04, 2, 2, attention_mode=2)
        assert "meta" in str(e) or "cpu" in str(e)
    q, args = _sas_small()
    _expect(openfia.OpenfiaError, "ori_block_table", openfia.npu_sparse_attn_sharedkv, q,
            **dict(args, ori_block_table=args["ori_block_table"].to("meta")))
    # Every tensor on the meta device: shapes only, through the registered op (tracing's way).
    out = kvq(qk.to("meta"), key.to("meta"), key.to("meta"), idx.to("meta"), 0.04, 2, 2,
              attention_mode=2)
    assert out.device.type == "meta" and out.shape == (1, 2, 2, 512)
    # torch.ops directly: the fake kernel refuses mixed devices too.
    with pytest.raises(openfia.OpenfiaError, match="device"):
        torch.ops.openfia.npu_kv_quant_sparse_flash_attention(
            qk.to("meta"), key, key.to("meta"), idx.to("meta"), 0.04, 2, 2, attention_mode=2)


def test_non_finite_scale_and_sinks():
    qk, key, idx = _kvq_small()
    kvq = openfia.npu_kv_quant_sparse_flash_attention
    for s in (math.nan, math.inf, -math.inf):
        _expect(openfia.OpenfiaError, "scale_value", kvq, qk, key, key, idx, s, 2, 2,
                attention_mode=2)
    prev = openfia.get_impl()
    try:
        outs = {}
        for impl in ("engine", "ref"):
            openfia.set_impl(impl)
            outs[impl] = kvq(qk, key, key, idx, 0.04, 2, 2, attention_mode=2, sparse_mode=0,
                             sinks=torch.tensor([math.nan, math.inf]))
        for out in outs.values():
            assert torch.isnan(out[:, :, 0]).all() and (out[:, :, 1] == 0).all()
    finally:
        openfia.set_impl(prev)


def test_fia_value_head_size_0_still_gives_the_lse():
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(1, 2, 4, 16, generator=g), torch.randn(1, 5, 4, 16, generator=g)
    fia = openfia.npu_fused_infer_attention_score
    prev = openfia.get_impl()
    try:
        for impl in ("engine", "ref"):
            openfia.set_impl(impl)
            out, lse = fia(q, k, torch.empty(1, 5, 4, 0), num_heads=4, input_layout="BSND",
                           softmax_lse_flag=True)
            _, want = fia(q, k, k, num_heads=4, input_layout="BSND", softmax_lse_flag=True)
            assert out.shape == (1, 2, 4, 0) and torch.isfinite(lse).all()
            assert torch.equal(lse, want), impl  # the lse does not depend on V
    finally:
        openfia.set_impl(prev)


def test_fia_tnd_without_lengths_and_empty_huge_batches_are_errors():
    fia = openfia.npu_fused_infer_attention_score
    qt, kt = torch.randn(3, 4, 16), torch.randn(5, 4, 16)
    _expect(openfia.OpenfiaError, "actual_seq_lengths", fia, qt, kt, kt, num_heads=4,
            input_layout="TND", actual_seq_lengths=[], actual_seq_lengths_kv=[])
    t0 = time.monotonic()
    empty = torch.empty(2**28, 0, 4, 16)  # no elements: the batch is a number alone
    _expect(openfia.OpenfiaError, "query", fia, empty, empty, empty, num_heads=4,
            input_layout="BSND")
    assert time.monotonic() - t0 < 5
    out, _ = fia(*(torch.empty(65536, 0, 4, 16),) * 3, num_heads=4, input_layout="BSND")
    assert out.shape == (65536, 0, 4, 16)


def test_kvqsfa_key_at_an_odd_byte_offset_is_copied():
    qk, key, idx = _kvq_small()
    kvq = openfia.npu_kv_quant_sparse_flash_attention
    want = kvq(qk, key, key, idx, 0.04, 2, 2, attention_mode=2)
    buf = torch.empty(key.numel() + 1, dtype=torch.int8)
    odd = buf[1:].view(key.shape)
    odd.copy_(key)
    assert odd.is_contiguous() and odd.data_ptr() % 4 != 0
    assert torch.equal(kvq(qk, odd, odd, idx, 0.04, 2, 2, attention_mode=2), want)


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "race":
        race(args[0], args[1], float(args[2]))
    elif role == "fork":
        fork_child_script()
    elif role == "settings":
        settings_child(args[0])
    elif role == "resource":
        resource_child(args[0])
    else:
        raise SystemExit(f"unknown role {role}")
