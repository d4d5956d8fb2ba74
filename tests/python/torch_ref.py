"""An independent torch float64 oracle for npu_fused_infer_attention_score.

It reads the same arguments the operator receives (not the case description), rebuilds per batch
the BNSD float64 query/key/value (gathering paged KV through block_table, concatenating the
shared prefix, dequantizing antiquant KV as (x + offset) * scale with per-token scales over
prefix-then-key positions, rounding to the query dtype unless inner_precise asks float16 for
high precision, unpacking int4 low nibble first), builds an explicit boolean visibility mask
(band rules per batch, the user mask, padding windows), and calls
torch.nn.functional.scaled_dot_product_attention in float64 (learnable sinks as one more key of
score sinks[h] and value 0). Rows with no visible key are 0 and have lse +inf; lse is logsumexp
of the float64 scores (and the sink). The output follows input_layout's part after "_". It
shares no code with openfia.

Alongside the output it returns a per-element error bound (see `tolerance` below), because the
bound depends on per-row quantities (|scores|, |V|, number of keys) the oracle has at hand.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

F64 = torch.float64
EPS32 = 2.0 ** -23
INF = float("inf")
UNIT_ROUNDOFF = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24}


def unpack_int4(w):
    """int32 words -> int8 values, 8 per word, low nibble first, two's complement."""
    x = w.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(8, dtype=torch.int64) * 4
    nib = (x[..., None] >> shifts) & 0xF
    nib = torch.where(nib >= 8, nib - 16, nib)
    return nib.reshape(*w.shape[:-1], w.shape[-1] * 8).to(torch.int8)


def to_bnsd(x, layout, n):
    """Query/KV tensor in the query layout `layout` -> [B, N, S, D] (NTD: [1, N, T, D])."""
    if layout == "BNSD":
        return x
    if layout == "NTD":
        return x[None]
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, n, h // n).permute(0, 2, 1, 3)
    raise ValueError(layout)


def _lengths(v, batch, default):
    if v is None:
        return list(default) if isinstance(default, list) else [default] * batch
    v = [int(x) for x in v]
    return v * batch if len(v) == 1 else v[:batch]


def _diff(cum):
    return [cum[0]] + [cum[i] - cum[i - 1] for i in range(1, len(cum))]


def _mask3(mask, batch, q_s):
    """User mask -> [B|1, Q, K] bool (True = masked out)."""
    m = mask.to(torch.bool)
    if m.dim() == 4:
        m = m[:, 0]
    elif m.dim() == 2:
        m = m[:, None, :] if q_s == 1 else m[None]
    elif m.dim() == 3 and q_s == 1 and m.shape[1] == 1:
        pass
    return m


class _Kv:
    """One of key / value / key_rope: a function (b) -> raw values [KVN, L, D] of the valid
    tokens plus their (tensor token, physical block, row) indices for the antiquant params."""

    def __init__(self, t, layout, kvn, block_table, block_size):
        self.t = t
        self.paged = block_table is not None
        self.bt = block_table
        self.bs = block_size
        self.kvn = kvn
        self.layout = layout
        if isinstance(t, (list, tuple)):
            self.list = [to_bnsd(self._unpack(x), layout, kvn) for x in t]
        else:
            self.list = None
            x = self._unpack(t)
            if self.paged:
                if x.dim() == 3:  # [nb, bs, KVN*D]
                    nb, bs, h = x.shape
                    x = x.reshape(nb, bs, kvn, h // kvn).permute(0, 2, 1, 3)
                elif x.dim() == 5:  # NZ [nb, KVN, D/c, bs, c]
                    nb, n_, dc, bs, c = x.shape
                    x = x.permute(0, 1, 3, 2, 4).reshape(nb, n_, bs, dc * c)
                self.cache = x  # [nb, KVN, bs, D]
            elif layout in ("TND", "NTD"):
                self.tnd = x.permute(1, 0, 2) if layout == "NTD" else x  # [T, KVN, D]
            else:
                self.bnsd = to_bnsd(x, layout, kvn)

    @staticmethod
    def _unpack(x):
        return unpack_int4(x) if x.dtype == torch.int32 else x

    def seq_len(self, b):
        if self.list is not None:
            return self.list[b].shape[2]
        return self.bnsd.shape[2]

    def gather(self, b, begin, length, tnd_start=0):
        """Raw [KVN, length, D] and index tensors (token, block, row) of each of the rows."""
        tok = torch.arange(begin, begin + length)
        if self.paged:
            blk = self.bt[b, tok // self.bs].to(torch.int64)
            row = tok % self.bs
            x = self.cache[blk, :, row].permute(1, 0, 2)
            return x, tok, blk, row
        if self.list is not None:
            x = self.list[b][0, :, begin:begin + length]
        elif self.layout in ("TND", "NTD"):
            x = self.tnd[tnd_start + begin:tnd_start + begin + length].permute(1, 0, 2)
        else:
            x = self.bnsd[b, :, begin:begin + length]
        return x, tok, None, None


def _dequant(raw, dt, scale, offset, mode, b, tok, blk, row, kvn, which, legacy):
    """(x + offset) * scale in float64, rounded to `dt` (None: not rounded). `which` 0 = K,
    1 = V. `tok` are the rows' positions in the batch's key sequence, the shared prefix first."""
    x = raw.to(F64)  # [KVN, L, D]
    if scale is None or x.numel() == 0:
        return x
    s = scale.to(F64)
    o = offset.to(F64) if offset is not None else None
    if legacy:
        s = s[which]
        o = o[which] if o is not None else None
    d = x.shape[-1]

    def pick(p):
        if p is None:
            return 0.0
        if mode == 1:  # per-token (1, B, S) [legacy after picking K/V: (B, S)]
            return p.reshape(-1, p.shape[-1])[b][tok][None, :, None]
        if mode == 2:  # per-tensor + per-head (N,)
            return p.reshape(kvn, 1, 1)
        if mode == 3:  # per-token + per-head (B, N, S)
            return p[b][:, tok][:, :, None]
        if mode == 4:  # page-managed per-token (blocknum, block_size)
            return p[blk, row][None, :, None]
        if mode == 5:  # page-managed per-token + per-head (blocknum, N, block_size)
            return p[blk, :, row].permute(1, 0)[:, :, None]
        # mode 0: per-tensor (numel 1) or per-channel (KVN*D values, head-major)
        if p.numel() == 1:
            return p.reshape(1, 1, 1)
        return p.reshape(kvn, 1, d)

    deq = (x + pick(o)) * pick(s)
    return deq if dt is None else deq.to(dt).to(F64)


def reference(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
              actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
              dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None,
              antiquant_offset=None, block_table=None, query_padding_size=None,
              kv_padding_size=None, key_antiquant_scale=None, key_antiquant_offset=None,
              value_antiquant_scale=None, value_antiquant_offset=None, key_shared_prefix=None,
              value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None,
              key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
              pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
              num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
              antiquant_mode=0, softmax_lse_flag=False, key_antiquant_mode=0,
              value_antiquant_mode=0, sinks=None):
    """Returns (out, lse, out_bound, lse_bound): out in the output layout as float64 (int8
    outputs as their float64 integers), lse (B, N, Q_S, 1) / (T, N, 1) or None, and per-element
    absolute error bounds an implementation must meet (see tolerance notes below)."""
    # "<query layout>_<output layout>"; key and value follow the query layout.
    layout, _, out_layout = input_layout.partition("_")
    out_layout = out_layout or layout
    packed = layout in ("TND", "NTD")
    n = num_heads
    kvn = num_key_value_heads or n
    qdt = query.dtype
    full_quant = qdt == torch.int8
    cdt = torch.float16 if full_quant else qdt  # dtype K/V are rounded to after dequant
    # inner_precise bit 0 = 0 (high precision) keeps float16 antiquant K/V unrounded.
    high_precision = qdt == torch.float16 and (inner_precise & 1) == 0
    if packed:
        cum_q = [int(x) for x in actual_seq_lengths]
        batch = len(cum_q)
        aq = _diff(cum_q)
        q_start = [cum_q[b] - aq[b] for b in range(batch)]

        def rows(t, b):  # [N, aq_b, D] of batch b
            t = t.permute(1, 0, 2) if layout == "NTD" else t
            return t[q_start[b]:q_start[b] + aq[b]].permute(1, 0, 2)

        q_s = query.shape[1 if layout == "NTD" else 0]
        qb = [rows(query, b) for b in range(batch)]
        qrb = [rows(query_rope, b) for b in range(batch)] if query_rope is not None else None
        q_begin = [0] * batch
        qpad = None
        incremental = False
    else:
        q4 = to_bnsd(query, layout, n)
        batch, _, q_s, _ = q4.shape
        qr4 = to_bnsd(query_rope, layout, n) if query_rope is not None else None
        incremental = q_s == 1
        aq = [q_s] * batch if incremental else _lengths(actual_seq_lengths, batch, q_s)
        qpad = (max(int(query_padding_size.reshape(-1)[0]), 0)
                if query_padding_size is not None and actual_seq_lengths is not None
                and not incremental else None)
        q_begin = [q_s - qpad - aq[b] if qpad is not None else 0 for b in range(batch)]
        qb = [q4[b, :, q_begin[b]:q_begin[b] + aq[b]] for b in range(batch)]
        qrb = ([qr4[b, :, q_begin[b]:q_begin[b] + aq[b]] for b in range(batch)]
               if qr4 is not None else None)

    kv_layout = layout
    K = _Kv(key, kv_layout, kvn, block_table, block_size)
    V = _Kv(value, kv_layout, kvn, block_table, block_size)
    KR = _Kv(key_rope, kv_layout, kvn, block_table, block_size) if key_rope is not None else None
    if packed and block_table is None:
        cum_kv = [int(x) for x in actual_seq_lengths_kv]
        akv = _diff(cum_kv)
        kv_start = [cum_kv[b] - akv[b] for b in range(batch)]
    else:
        kv_start = [0] * batch
        default = [K.seq_len(b) for b in range(batch)] if not K.paged else None
        akv = _lengths(actual_seq_lengths_kv, batch, default)
    kvpad = (max(int(kv_padding_size.reshape(-1)[0]), 0)
             if kv_padding_size is not None and actual_seq_lengths_kv is not None else None)
    kv_begin = [K.seq_len(b) - kvpad - akv[b] if kvpad is not None else 0 for b in range(batch)]
    for b in range(batch):
        if incremental and kv_begin[b] < 0:  # the window starts before the tensor: no key
            kv_begin[b], akv[b] = 0, 0

    # Antiquant parameters: the separate K/V ones win over the legacy joint ones.
    if key_antiquant_scale is not None:
        aq_k = (key_antiquant_scale, key_antiquant_offset, key_antiquant_mode, False)
        aq_v = (value_antiquant_scale, value_antiquant_offset, value_antiquant_mode, False)
    elif antiquant_scale is not None:
        legacy_mode = 1 if antiquant_mode == 1 else 0
        aq_k = (antiquant_scale, antiquant_offset, legacy_mode, True)
        aq_v = aq_k
    else:
        aq_k = aq_v = (None, None, 0, False)

    p_len = 0
    if key_shared_prefix is not None:
        unpack = unpack_int4 if key_shared_prefix.dtype == torch.int32 else (lambda t: t)
        kp_all = to_bnsd(unpack(key_shared_prefix), kv_layout, kvn)
        p_len = (int(actual_shared_prefix_len.reshape(-1)[0]) if actual_shared_prefix_len
                 is not None else kp_all.shape[2])
        kp = kp_all[0, :, :p_len]
        vp = to_bnsd(unpack(value_shared_prefix), kv_layout, kvn)[0, :, :p_len]

    mask3 = _mask3(atten_mask, batch, q_s) if atten_mask is not None else None
    dv = None
    outs, lses, obounds, lbounds, quant_zero = [], [], [], [], []
    for b in range(batch):
        s1 = aq[b]
        kraw, tok, blk, row = K.gather(b, kv_begin[b], akv[b], kv_start[b])
        vraw, _, _, _ = V.gather(b, kv_begin[b], akv[b], kv_start[b])
        if p_len:  # the prefix precedes the batch's keys, also for per-token scales
            kraw, vraw = torch.cat([kp, kraw], 1), torch.cat([vp, vraw], 1)
            tok = torch.cat([torch.arange(p_len), p_len + tok])
        if full_quant:
            kb, vb = kraw.to(F64), vraw.to(F64)
        else:
            rdt = None if high_precision and aq_k[0] is not None else cdt
            kb = _dequant(kraw, rdt, aq_k[0], aq_k[1], aq_k[2], b, tok, blk, row, kvn, 0, aq_k[3])
            vb = _dequant(vraw, rdt, aq_v[0], aq_v[1], aq_v[2], b, tok, blk, row, kvn, 1, aq_v[3])
        if KR is not None:
            kb = torch.cat([kb, KR.gather(b, kv_begin[b], akv[b], kv_start[b])[0].to(F64)], -1)
        s2 = kb.shape[1]
        dv = vb.shape[-1]
        qq = qb[b].to(F64)
        if qrb is not None:
            qq = torch.cat([qq, qrb[b].to(F64)], -1)

        # ---- visibility [s1, s2] (True = attend) ----
        i = torch.arange(s1)[:, None]
        j = torch.arange(s2)[None, :]
        visible = torch.ones(s1, s2, dtype=torch.bool)
        user_mask_applies = mask3 is not None and (incremental or sparse_mode in (0, 1))
        if not incremental:
            # Mode 0 with left padding forces pre = next = INT_MAX (docs/semantics.md 1.3).
            if sparse_mode == 0 and atten_mask is not None and qpad is None and kvpad is None:
                visible &= (j <= i + next_tokens) & (j >= i - pre_tokens)
            elif sparse_mode == 2:
                visible &= j <= i
            elif sparse_mode == 3:
                visible &= j <= i + (s2 - s1)
            elif sparse_mode == 4:
                visible &= (j >= i + (s2 - s1) - pre_tokens) & (j <= i + (s2 - s1) + next_tokens)
        if user_mask_applies:
            mb = mask3[b if mask3.shape[0] > 1 else 0]
            rows = (torch.arange(s1) + q_begin[b] if mb.shape[0] > 1
                    else torch.zeros(s1, dtype=torch.int64))
            cols = torch.arange(s2) + kv_begin[b]
            visible &= ~mb[rows][:, cols]

        scores = torch.einsum("hid,hjd->hij", qq, kb.repeat_interleave(n // kvn, 0)) * scale
        if full_quant:
            scores = scores * float(dequant_scale1.to(torch.float32).reshape(-1)[0])
        addmask = torch.zeros(n, s1, s2, dtype=F64)
        if pse_shift is not None:
            pb = pse_shift[b if pse_shift.shape[0] > 1 else 0].to(F64)
            addmask = addmask + pb[:, q_begin[b]:q_begin[b] + s1][:, :, kv_begin[b]:kv_begin[b] + s2]
        addmask = addmask.masked_fill(~visible[None], -INF)
        any_visible = visible.any(-1)  # [s1]

        # ---- attention ----
        if full_quant and s2 == 0:
            o, bound_fq = torch.zeros(n, s1, dv, dtype=F64), torch.zeros(n, s1, dv, dtype=F64)
        elif full_quant:
            o, bound_fq = _full_quant_attention(scores + addmask, vb, n // kvn, quant_scale1,
                                                dequant_scale2)
        elif s1 == 0 or s2 == 0:
            o = torch.zeros(n, s1, dv, dtype=F64)
        elif sinks is not None:
            # A sink is one more key per head: score sinks[h], a zero value row.
            sk = sinks.to(F64)[:, None, None].expand(n, s1, 1)
            o = F.scaled_dot_product_attention(
                qq[None], torch.cat([kb, kb.new_zeros(kvn, 1, kb.shape[-1])], 1)[None],
                torch.cat([vb, vb.new_zeros(kvn, 1, dv)], 1)[None],
                attn_mask=torch.cat([addmask, sk], -1)[None], scale=scale, enable_gqa=True)[0]
        else:
            o = F.scaled_dot_product_attention(qq[None], kb[None], vb[None],
                                               attn_mask=addmask[None], scale=scale,
                                               enable_gqa=True)[0]
        z = scores + addmask
        if sinks is not None and s2 > 0:
            z = torch.cat([z, sinks.to(F64)[:, None, None].expand(n, s1, 1)], -1)
        lse = (torch.logsumexp(z, -1) if s2 > 0
               else torch.full((n, s1), -INF, dtype=F64))  # [n, s1]
        o = torch.where(any_visible[None, :, None], o, torch.zeros((), dtype=F64))
        lse = torch.where(any_visible[None, :], lse, torch.full((), INF, dtype=F64))

        # ---- error bounds (derivation in `tolerance`) ----
        vrep = vb.abs().repeat_interleave(n // kvn, 0)  # [n, s2, dv]
        vis = visible[None, :, :, None]
        if s2 == 0:
            vmax = torch.zeros(n, s1, dv, dtype=F64)
        else:  # [n, s1, dv]
            vmax = torch.where(vis, vrep[:, None], torch.zeros((), dtype=F64)).amax(2)
        qabs = qq.abs()
        sabs = torch.einsum("hid,hjd->hij", qabs, kb.abs().repeat_interleave(n // kvn, 0)) * scale
        if full_quant:
            sabs = sabs * float(dequant_scale1.to(torch.float32).reshape(-1)[0])
        sabs = (torch.where(visible[None], sabs, torch.zeros((), dtype=F64)).amax(-1) if s2 > 0
                else torch.zeros(n, s1, dtype=F64))  # [n, s1]
        rounded_kv = aq_k[0] is not None and not high_precision
        ob = tolerance(o, vmax, sabs, s2, qq.shape[-1], cdt, full_quant, rounded_kv)
        if full_quant:
            ob = ob + bound_fq
        lb = (qq.shape[-1] * EPS32 * sabs + 8 * EPS32 * lse.abs().nan_to_num(0, 0, 0) + 1e-6)
        if rounded_kv:  # K elements may round to the neighbouring query-dtype value
            lb = lb + UNIT_ROUNDOFF[cdt] * 2 * sabs
        if full_quant:  # S = fp16(fp16(S_int * float19(ds1)) * fp16(scale)) (docs/semantics.md 1.8),
            # so m and every E see the float19 truncation (2^-10) and two fp16 roundings (2^-11 each)
            lb = lb + 2.0 ** -9 * sabs
        outs.append(o)
        # docs/semantics.md 1.12: with post-quantization a prompt batch without any key is int8 0
        # (the quantized zero sat(round(qo2)) is for rows without a visible key elsewhere).
        quant_zero.append(quant_scale2 is not None and s2 == 0 and not incremental)
        lses.append(lse)
        obounds.append(ob)
        lbounds.append(lb)

    # ---- assemble outputs in the output layout ----
    out_dtype = torch.int8 if quant_scale2 is not None else (torch.float16 if full_quant else qdt)
    if packed:
        t_total = q_s
        out = torch.zeros(t_total, n, dv, dtype=F64)
        bound = torch.zeros_like(out)
        written = torch.zeros(t_total, n, dv, dtype=torch.bool)  # rows the operator computes
        lse_t = torch.full((t_total, n, 1), INF, dtype=F64)
        lbound = torch.zeros_like(lse_t)
        for b in range(batch):
            sl = slice(q_start[b], q_start[b] + aq[b])
            written[sl] = not quant_zero[b]
            out[sl] = outs[b].permute(1, 0, 2)
            bound[sl] = obounds[b].permute(1, 0, 2)
            lse_t[sl, :, 0] = lses[b].permute(1, 0)
            lbound[sl, :, 0] = lbounds[b].permute(1, 0)
        if out_layout == "NTD":
            out, bound, written = (x.permute(1, 0, 2).contiguous() for x in (out, bound, written))
    else:
        o4 = torch.zeros(batch, n, q_s, dv, dtype=F64)
        b4 = torch.zeros_like(o4)
        w4 = torch.zeros(batch, n, q_s, dv, dtype=torch.bool)  # rows the operator computes
        lse_t = torch.full((batch, n, q_s, 1), INF, dtype=F64)
        lbound = torch.zeros_like(lse_t)
        for b in range(batch):
            sl = slice(q_begin[b], q_begin[b] + aq[b])
            w4[b, :, sl] = not quant_zero[b]
            o4[b, :, sl] = outs[b]
            b4[b, :, sl] = obounds[b]
            lse_t[b, :, sl, 0] = lses[b]
            lbound[b, :, sl, 0] = lbounds[b]
        out = _from_bnsd(o4, out_layout)
        bound = _from_bnsd(b4, out_layout)
        written = _from_bnsd(w4, out_layout)
    if quant_scale2 is not None:
        out, bound = _post_quant(out, bound, quant_scale2, quant_offset2, out_layout, n, dv)
        # Rows outside the valid query windows and prompt batches without keys stay int8 0.
        out = torch.where(written, out, torch.zeros((), dtype=F64))
        bound = torch.where(written, bound, torch.zeros((), dtype=F64))
    else:
        # Output rounding of the implementation (half-ulp of the output dtype), see tolerance.
        bound = bound + UNIT_ROUNDOFF[out_dtype] * out.abs()
    if not softmax_lse_flag:
        lse_t = torch.zeros(1, dtype=F64)
        lbound = torch.zeros(1, dtype=F64)
    return out, lse_t, bound, lbound, out_dtype


def _from_bnsd(x, layout):
    """[B, N, S, D] -> the output layout (BSH, BSND, BNSD, NBSD)."""
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "NBSD":
        return x.permute(1, 0, 2, 3).contiguous()
    if layout == "BSND":
        return x.permute(0, 2, 1, 3).contiguous()
    if layout == "BSH":
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d)
    raise ValueError(layout)


def tolerance(o, vmax, sabs, n_keys, d_qk, cdt, full_quant, antiquant):
    """Per-element absolute bound on |openfia - oracle| before the output rounding.

    The oracle is exact (float64). openfia differs from it by:
      (a) rounding the unnormalized probabilities P (each in [0, 1]) to the compute dtype before
          P*V, as the NPU does: relative error <= u (unit roundoff of bf16/fp16), so the
          normalized output moves by <= u * sum_j p_j |v_j| / l <= u * max_j |v_j|; the row sum l
          may come from rounded or unrounded P, which adds another u * max|v|;
      (b) fp32 scores: |ds_j| <= d_qk * eps32 * sum_d |q_d k_d| * scale (worst-case dot
          product error); softmax outputs move by <= 2 * max_j |ds_j| * max_j |v_j|;
      (c) fp32 accumulation of P*V and of l over n_keys terms: <= n_keys * eps32 * max|v|;
      (d) antiquant: a dequantized K/V element may round to the neighbouring compute-dtype value
          when openfia's fp32 (x + offset) * scale lands on a rounding boundary that float64
          does not: V moves by u |v|, scores by u * sum|q k|.
    Each term is a worst case, so the sum is a bound, not an estimate; a factor 2 covers the
    fp32 exp/log evaluation. The caller adds u_out * |o| for the final rounding.
    """
    u = UNIT_ROUNDOFF[cdt]
    ds = d_qk * EPS32 * sabs  # [n, s1]
    if antiquant:
        ds = ds + u * sabs
    per_row = 2 * u + 2 * ds + n_keys * EPS32 + (u if antiquant else 0.0)
    return 2 * per_row[..., None] * vmax


def _full_quant_attention(z, vb, group, quant_scale1, dequant_scale2):
    """int8 Q/K/V: P_i8 = sat(round_half_even(exp(z - m) * qs1)), O = (P_i8 @ V) * ds2 / l.
    Returns O and a bound: P_i8[j] may differ by one step where exp(z_j - m) * qs1 lies within
    the implementation's rounding of that product (fp16 rounding of E, 2^-11 relative, plus the
    fp32 score error) of a .5 boundary; each such step moves O by |V_j| * ds2 / l."""
    qs1 = float(quant_scale1.to(torch.float32).reshape(-1)[0])
    ds2 = float(dequant_scale2.to(torch.float32).reshape(-1)[0])
    m = z.amax(-1, keepdim=True)
    e = torch.exp(z - m).nan_to_num(0.0)
    l = e.sum(-1, keepdim=True)
    pe = e * qs1
    p8 = torch.round(pe).clamp(-128, 127)
    vrep = vb.repeat_interleave(group, 0)
    o = torch.einsum("hij,hjd->hid", p8, vrep) * ds2 / l
    frac = pe - torch.floor(pe)
    near = (frac - 0.5).abs() <= pe * (2.0 ** -10 + 1e-5) + 1e-9
    bound = torch.einsum("hij,hjd->hid", near.to(F64), vrep.abs()) * ds2 / l
    return o, bound.nan_to_num(0.0)


def _post_quant(out, bound, qs2, qo2, layout, n, dv):
    """y = x * qs2 + qo2 rounded half away from zero, saturated to int8. The implementation's
    x may differ from the oracle's by `bound`, and the kernel may pass y through fp16 (2^-11
    relative) before rounding: allowed |dy| <= bound * |qs2| + |y| * 2^-11 + 1 (one rounding
    step)."""
    s = qs2.to(F64)
    o = qo2.to(F64) if qo2 is not None else torch.zeros_like(s)
    if s.numel() > 1:
        if layout == "BSH":
            s, o = s.reshape(-1), o.reshape(-1)
        elif layout in ("BNSD", "NTD"):  # (.., N, S | T, D)
            s, o = s.reshape(n, 1, dv), o.reshape(n, 1, dv)
        elif layout == "NBSD":
            s, o = s.reshape(n, 1, 1, dv), o.reshape(n, 1, 1, dv)
        else:  # BSND, TND: (.., N, D)
            s, o = s.reshape(n, dv), o.reshape(n, dv)
    else:
        s, o = s.reshape(()), o.reshape(())
    y = out * s + o
    yq = (torch.sign(y) * torch.floor(y.abs() + 0.5)).clamp(-128, 127)
    ybound = bound * s.abs() + y.abs() * 2.0 ** -11 + 1.0
    return yq, ybound
