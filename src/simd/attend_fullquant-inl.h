// openfia internal: int8 full quantization (int8 query, key and value; SEMANTICS 1.8) on the
// engine. Included by attend-inl.h (inside the per-target namespace, after ResolveKey).
//
// The same step-by-step fp16 emulation as the reference's FullQuantRow, on int8 dot products:
//   S = fp16(fp16(clip(float(Q.K) * ds1, +-65504)) * fp16(scale)) [+ pse, fp16 add]
//   m = max over every visible key of the row (NaN-propagating)
//   E = fp16(exp(S - m)); l = sum E (double); P8 = clip(rne(fp16(E * fp16(qs1))), -128, 127)
//   out = float(sum P8 * V) * ds2 / fp16(l)
// The max is over all visible keys at once (the reference's decision), so an item makes two
// passes over its keys: the first finds m, the second recomputes the int8 scores (cheaper than
// holding S_kv scores per row: the workspace stays bounded by the tile) and accumulates. The
// plan never splits full-quant items (plan.cc). exp is std::exp, exactly the reference's.
//
// Row states handed to the epilogue: m, l (float of the double sum) and acc = the final fp32
// output row; engine.cc's Epilogue writes acc as is for full quantization (no sinks here).

inline float F16Round(float x) { return cvt::RoundToElem(x, Elem::kF16); }

inline void AttendFullQuant(const Problem& p, const WorkItem& w, EngineScratch& sc,
                            const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr float kF16Max = 65504.f;
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows(), G = p.group();
  const int64_t hrows = w.head_rows(), D = p.d_qk, Dv = p.d_v;
  const ItemOrigins org = OriginsOf(p, b);
  const int64_t pre = org.pre, next = org.next, mask_row0 = org.mask_row0,
                mask_col0 = org.mask_col0, pse_row0 = org.pse_row0, pse_col0 = org.pse_col0;
  // dequant_scale1 as the golden's "float19" (low 13 mantissa bits cleared).
  const float ds1 = cvt::FromBits(cvt::Bits(p.dequant_scale1) & 0xFFFFE000u);
  const float scale16 = F16Round(static_cast<float>(p.scale));
  const float qs1_16 = F16Round(p.quant_scale1);

  // The int8 query rows live over sc.q (as bytes).
  int8_t* q8 = reinterpret_cast<int8_t*>(sc.q);  // [rows][D]
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t hk = w.hk + r / hrows, rr = r % hrows;
    const int64_t h = hk * G + w.g0 + rr / nq, row = p.q_begin[b] + w.i0 + rr % nq;
    const int8_t* src = static_cast<const int8_t*>(p.q.Base(b));
    const int64_t qo = p.q.Offset(b, h, row, 0);
    for (int64_t d = 0; d < D; ++d) q8[r * D + d] = src[qo + DOff(p.q, d)];
    out.m[r] = kNegInf;
    out.l[r] = 0.f;
    for (int64_t d = 0; d < out.acc_stride; ++d) out.acc[r * out.acc_stride + d] = 0.f;
  }
  if (w.j0 >= w.j1) return;

  // Visibility of key j from logical query i (band and bit mask, as the reference).
  const auto visible = [&](int64_t i, int64_t j) {
    if (j < i - pre || j > i + next) return false;
    if (p.mask == nullptr) return true;
    return p.mask[b * p.mask_sb + (mask_row0 + i) * p.mask_ss + (mask_col0 + j) * p.mask_sk] == 0;
  };
  // Score of row r against key j whose int8 row starts at k8.
  const auto score = [&](int64_t r, int64_t j, const int8_t* k8, int64_t ksd) {
    const int8_t* qr = q8 + r * D;
    int32_t acc = 0;
    if (ksd == 1) {
      for (int64_t d = 0; d < D; ++d) acc += static_cast<int32_t>(qr[d]) * k8[d];
    } else {
      for (int64_t d = 0; d < D; ++d) acc += static_cast<int32_t>(qr[d]) * k8[d * ksd];
    }
    float x = std::clamp(static_cast<float>(acc) * ds1, -kF16Max, kF16Max);
    x = F16Round(F16Round(x) * scale16);
    if (p.pse != nullptr) {
      const int64_t hk = w.hk + r / hrows, rr = r % hrows;
      const int64_t h = hk * G + w.g0 + rr / nq, i = w.i0 + rr % nq;
      const int64_t po =
          b * p.pse_sb + h * p.pse_sh + (pse_row0 + i) * p.pse_ss + (pse_col0 + j) * p.pse_sk;
      x = F16Round(x + cvt::Load(p.pse, p.pse_elem, po));
    }
    return x;
  };
  // K/V rows: ResolveKey gives element offsets into int8 storage; channels must be reachable
  // with one stride (EngineSupports requires no NZ split for full quantization).
  const auto row8 = [&](const KvOperand& kv, int64_t hk, int64_t j, int64_t* sd) {
    const void* base;
    int64_t off;
    uint8_t pre_flag;
    ResolveKey(p, kv, b, hk, j, &base, &off, &pre_flag);
    *sd = (pre_flag ? kv.prefix : kv.cache).sd;
    return static_cast<const int8_t*>(base) + off;
  };

  // Pass 1: the row maxima (NaN-propagating: a NaN score, only possible through pse, wins).
  for (int64_t j = w.j0; j < w.j1; ++j) {
    for (int64_t hx = 0; hx < w.n_hk; ++hx) {
      const int64_t hk = w.hk + hx;
      int64_t ksd = 1;
      const int8_t* k8 = nullptr;
      for (int64_t rr = 0; rr < hrows; ++rr) {
        if (!visible(w.i0 + rr % nq, j)) continue;
        if (k8 == nullptr) k8 = row8(p.k, hk, j, &ksd);
        const int64_t r = hx * hrows + rr;
        const float s = score(r, j, k8, ksd);
        if (std::isnan(s) || std::isnan(out.m[r]))
          out.m[r] = std::numeric_limits<float>::quiet_NaN();
        else
          out.m[r] = std::max(out.m[r], s);
      }
    }
  }

  // Pass 2: E, l, P8 and the exact integer sums of P8 * V (int64, like the reference, in the
  // full-quant scratch ScratchBuffer allocates for such problems).
  int64_t* acc64 = sc.acc64;  // [rows][Dv]
  double* lsum = sc.lsum;     // [rows]
  uint8_t* nan_row = sc.vis;  // [rows]
  for (int64_t x = 0; x < rows * Dv; ++x) acc64[x] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    lsum[r] = 0.0;
    nan_row[r] = std::isnan(out.m[r]) ? 1 : 0;
  }
  for (int64_t j = w.j0; j < w.j1; ++j) {
    for (int64_t hx = 0; hx < w.n_hk; ++hx) {
      const int64_t hk = w.hk + hx;
      int64_t ksd = 1, vsd = 1;
      const int8_t* k8 = nullptr;
      const int8_t* v8 = nullptr;
      for (int64_t rr = 0; rr < hrows; ++rr) {
        const int64_t r = hx * hrows + rr;
        if (nan_row[r] || !visible(w.i0 + rr % nq, j)) continue;
        if (k8 == nullptr) {
          k8 = row8(p.k, hk, j, &ksd);
          v8 = row8(p.v, hk, j, &vsd);
        }
        const float s = score(r, j, k8, ksd);
        const float e = F16Round(std::exp(s - out.m[r]));
        lsum[r] += e;
        const float pq = F16Round(e * qs1_16);
        if (std::isnan(pq)) {
          nan_row[r] = 1;
          continue;
        }
        const int64_t p8 = static_cast<int64_t>(std::clamp(std::nearbyint(pq), -128.f, 127.f));
        if (p8 == 0) continue;
        int64_t* a = acc64 + r * Dv;
        for (int64_t d = 0; d < Dv; ++d) a[d] += p8 * v8[d * vsd];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* a = out.acc + r * out.acc_stride;
    if (nan_row[r]) {
      out.m[r] = std::numeric_limits<float>::quiet_NaN();
      out.l[r] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t d = 0; d < Dv; ++d) a[d] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    if (out.m[r] == kNegInf) continue;  // no visible key: the epilogue writes 0 / +inf
    out.l[r] = static_cast<float>(lsum[r]);
    const float l16 = F16Round(static_cast<float>(lsum[r]));
    for (int64_t d = 0; d < Dv; ++d) {
      const float od = static_cast<float>(acc64[r * Dv + d]) * p.dequant_scale2;
      a[d] = od / l16;
    }
  }
}
