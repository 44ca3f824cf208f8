// kernels/cpu/cpu_backend.cpp — the CPU backend (see cpu_backend.hpp for threading and
// determinism). Every linear layer's product is an OpenBLAS sgemm whose rows (or output rows) are
// split into fixed blocks that this backend's thread pool runs (cpu/detail/thread_pool.hpp);
// attention's per-head products run in this file's register-tiled kernel (attn_tile), one head per
// thread at a time; every other loop is a fixed row or element partition written so that GCC
// vectorizes it (-O3 -march=native, no fast-math; `omp simd` pragmas fix the order of the few
// vectorized reductions).
#include "kernels/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cpu/detail/openblas_core.hpp"
#include "kernels/cpu/detail/thread_pool.hpp"
#include "kernels/cpu/detail/vec_math.hpp"
#include "kernels/detail/host_backend.hpp"
#include "kernels/merge_ops.hpp"

namespace dd::kernels {
namespace {

using cpu_detail::fast_expf;
using cpu_detail::fast_sigmoidf;

constexpr float layernorm_eps = 1e-5f;
// sqrt(2/pi) and the cubic coefficient of the GELU tanh approximation (Hendrycks & Gimpel 2016).
constexpr float gelu_k = 0.7978845608028654f;
constexpr float gelu_c = 0.044715f;

// Elements (or row·columns) below which a loop runs on the calling thread only: spreading a few
// microseconds of work over threads costs more than it saves.
constexpr size_t min_work_per_thread = 16384;

/// [begin, end) of chunk `i` of `n_chunks` equal static chunks of [0, n).
inline void chunk_range(size_t n, int n_chunks, int i, size_t& begin, size_t& end) {
  const size_t base = n / n_chunks, rem = n % n_chunks;
  begin = i * base + std::min<size_t>(i, rem);
  end = begin + base + (static_cast<size_t>(i) < rem ? 1 : 0);
}

/// Makes OpenBLAS single-threaded: this backend parallelizes around sgemm with its own threads.
/// openblas_set_num_threads is process-global, so this is re-checked before every op that calls
/// BLAS (a cheap read) in case other code in the process changed it.
inline void ensure_openblas_single_threaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// Before main, so that every sgemm in the process (this backend's and any other caller's) runs
// the kernels this CPU supports (cpu/detail/openblas_core.hpp).
[[maybe_unused]] const bool openblas_core_selected = (cpu_detail::select_openblas_core(), true);

class cpu_backend final : public detail::host_backend, public fused_merge_ops {
 public:
  explicit cpu_backend(int threads) : threads_(threads), pool_(threads) {
    cpu_detail::select_openblas_core();  // already done before main; once per process
    ensure_openblas_single_threaded();
  }

  std::string name() const override { return "cpu"; }

  // ---- threading helpers -------------------------------------------------------------------
  /// Number of chunks for `work` units: at most threads_, at least 1, each >= min_work.
  int chunks_for(size_t work, size_t min_work = min_work_per_thread) const {
    const size_t by_work = std::max<size_t>(1, work / std::max<size_t>(1, min_work));
    return static_cast<int>(std::min<size_t>(static_cast<size_t>(threads_), by_work));
  }

  /// Calls f(chunk, begin, end) for `n_chunks` static chunks of [0, n), in parallel on the
  /// pool. The chunk → range map depends only on (n, n_chunks).
  template <class F>
  void for_chunks(size_t n, int n_chunks, F&& f) const {
    if (n_chunks <= 1) {
      f(0, size_t{0}, n);
      return;
    }
    pool_.run(n_chunks, [&](int c) {
      size_t b = 0, e = 0;
      chunk_range(n, n_chunks, c, b, e);
      f(c, b, e);
    });
  }

  /// Parallel loop over [0, n) with a work estimate of `work_per_item` per item. A loop that
  /// fills every thread with at least 4 · min_work_per_thread gets up to 4 chunks per thread, so
  /// that a thread slowed by another process on its core takes fewer of them (the items are
  /// independent, so the split does not change any result).
  template <class F>
  void parallel_range(size_t n, size_t work_per_item, F&& f) const {
    const size_t work = n * std::max<size_t>(1, work_per_item);
    for_chunks(n, std::min<int>(chunks_in_turn(work), static_cast<int>(std::max<size_t>(1, n))),
               [&](int, size_t b, size_t e) { f(b, e); });
  }

  /// Chunks for `work` units that the participants claim in turn: chunks_for(work), raised to up
  /// to 4 per thread when each still holds at least 4 · min_work_per_thread (a thread slowed by
  /// another process on its core then takes fewer of them). Depends only on work and threads_.
  int chunks_in_turn(size_t work) const {
    const int nc = chunks_for(work);
    if (nc <= 1) return nc;
    const size_t by_work = work / (4 * min_work_per_thread);
    return static_cast<int>(std::clamp<size_t>(by_work, nc, 4 * static_cast<size_t>(nc)));
  }

  // ---- memory --------------------------------------------------------------------------------
  /// memset split over the pool: one core does not saturate the memory bus, and the gradient
  /// buffers zeroed once per step are tens of MB at the larger models.
  void zero_bytes(void* dst, size_t n) override {
    if (n == 0) return;
    auto* p = static_cast<unsigned char*>(dst);
    for_chunks(n, chunks_in_turn(n / sizeof(float)),
               [&](int, size_t b, size_t e) { std::memset(p + b, 0, e - b); });
  }

  // ---- encoder -------------------------------------------------------------------------------
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) override {
    const size_t BT = static_cast<size_t>(B) * T;
    parallel_range(BT, C, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        const float* te = wte + static_cast<size_t>(tokens[i]) * C;
        const float* pe = wpe + (i % T) * C;
        float* o = out + i * C;
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
      }
    });
  }

  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) override {
    // Partition the C columns: every thread walks all positions in order, so each gradient
    // element receives its contributions in (b, t) order whatever the thread count.
    const size_t BT = static_cast<size_t>(B) * T;
    const int nc = std::min(chunks_for(BT * C * 2), std::max(1, C / 16));
    for_chunks(static_cast<size_t>(C), nc, [&](int, size_t c0, size_t c1) {
      for (size_t i = 0; i < BT; ++i) {
        const float* d = dout + i * C;
        float* te = dwte + static_cast<size_t>(tokens[i]) * C;
        float* pe = dwpe + (i % T) * C;
        for (size_t c = c0; c < c1; ++c) {
          te[c] += d[c];
          pe[c] += d[c];
        }
      }
    });
  }

  // ---- layer norm ----------------------------------------------------------------------------
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(C) * 4, [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n)
        layernorm_row(out + n * C, mean[n], rstd[n], inp + n * C, weight, bias, C);
    });
  }

  void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* weight, const float* bias, int N,
                                  int C) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(C) * 5, [&](size_t lo, size_t hi) {
      for (size_t n = lo; n < hi; ++n) {
        float* x = res + n * C;
        const float* ar = a + n * C;
        const float* br = b + n * C;
        for (int c = 0; c < C; ++c) x[c] = ar[c] + br[c];  // residual_forward's expression
        layernorm_row(out + n * C, mean[n], rstd[n], x, weight, bias, C);
      }
    });
  }

  /// One row of layernorm_forward: o (C) from x (C); its mean and rstd into m_out, r_out.
  static void layernorm_row(float* o, float& m_out, float& r_out, const float* x,
                            const float* weight, const float* bias, int C) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += x[c];
    const float m = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      v += d * d;
    }
    const float r = 1.0f / std::sqrt(v / C + layernorm_eps);
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    m_out = m;
    r_out = r;
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    // Chunks claimed in turn, at most one per row; their count depends on the shapes and the
    // thread count only. Per-chunk partial sums of dweight and dbias, combined in chunk order
    // below.
    const int nc = std::min(chunks_in_turn(static_cast<size_t>(N) * C * 6), std::max(1, N));
    std::vector<float> partial(static_cast<size_t>(nc) * 2 * C, 0.0f);
    for_chunks(static_cast<size_t>(N), nc, [&](int chunk, size_t b, size_t e) {
      float* dw = partial.data() + static_cast<size_t>(chunk) * 2 * C;
      float* db = dw + C;
      for (size_t n = b; n < e; ++n) {
        const float* x = inp + n * C;
        const float* dy = dout + n * C;
        const float m = mean[n], r = rstd[n];
        float mean_g = 0.0f, mean_gx = 0.0f;
#pragma omp simd reduction(+ : mean_g, mean_gx)
        for (int c = 0; c < C; ++c) {
          const float xhat = (x[c] - m) * r;
          const float g = weight[c] * dy[c];
          mean_g += g;
          mean_gx += g * xhat;
        }
        mean_g /= C;
        mean_gx /= C;
        float* dx = dinp + n * C;
        // Element-wise (no reduction), so vectorizing changes no bit; GCC does not on its own
        // (five pointers it cannot prove apart: the loop ran scalar, about 3x the forward).
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float xhat = (x[c] - m) * r;
          const float g = weight[c] * dy[c];
          db[c] += dy[c];
          dw[c] += xhat * dy[c];
          dx[c] += (g - mean_g - xhat * mean_gx) * r;
        }
      }
    });
    for (int k = 0; k < nc; ++k) {
      const float* dw = partial.data() + static_cast<size_t>(k) * 2 * C;
      const float* db = dw + C;
      for (int c = 0; c < C; ++c) {
        dweight[c] += dw[c];
        dbias[c] += db[c];
      }
    }
  }

  // ---- linear layers -------------------------------------------------------------------------
  // The linear layers' products are split into blocks that the pool's participants claim in
  // turn (cpu/detail/thread_pool.hpp): the forward into one row block per thread; the backward
  // into one dinp row block and one dweight slice per thread, so that a participant whose core is
  // shared with another process, or that wakes late, takes fewer of them instead of the others
  // waiting for its pair. Each block is one single-threaded sgemm over the whole K
  // (OpenBLAS blocks K the same way whatever M and N are), so each output element's sum is the
  // same whichever blocks exist and whichever thread runs them. The forward gets no more blocks
  // than threads: each block packs the whole weight again, and four blocks for two threads cost
  // 5-11 % more CPU time than two at the 10.8M model's shapes.

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int IC, int OC) override {
    ensure_openblas_single_threaded();
    const int nc =
        std::min(chunks_for(static_cast<size_t>(N) * IC * OC, 1 << 20), std::max(1, N / 16));
    for_chunks(static_cast<size_t>(N), nc, [&](int, size_t b, size_t e) {
      const int rows = static_cast<int>(e - b);
      if (rows == 0) return;
      float* o = out + b * OC;
      if (bias != nullptr) {
        for (int n = 0; n < rows; ++n)
          std::memcpy(o + static_cast<size_t>(n) * OC, bias, OC * sizeof(float));
      }
      // out = inp · weightᵀ (+ the bias already in out, through beta = 1).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, IC, 1.0f, inp + b * IC, IC,
                  weight, IC, bias != nullptr ? 1.0f : 0.0f, o, OC);
    });
  }

  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int IC, int OC) override {
    matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, 1.0f);
  }

  // beta = 0: OpenBLAS clears each chunk's dinp rows itself (in the thread that then fills them)
  // and adds the same products in the same order as into a zeroed buffer with beta = 1.
  void matmul_backward_writes_dinp(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, int N, int IC,
                                   int OC) override {
    matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, 0.0f);
  }

  /// matmul_backward with dinp = dinp_beta · dinp + dout · weight (1: accumulate, 0: write).
  void matmul_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                  const float* weight, int N, int IC, int OC, float dinp_beta) {
    ensure_openblas_single_threaded();
    const size_t work = static_cast<size_t>(N) * IC * OC;
    const int nc = std::min(chunks_for(work, 1 << 20), std::max(1, std::min(N, OC) / 16));
    // dweight is split along its longer side: each block packs the other operand whole, and
    // doutᵀ (OC × N) against inp (N × IC) makes the smaller one the cheaper to pack twice.
    const bool dw_by_columns = IC > OC && IC / nc >= 16;
    // Blocks 0 .. nc-1: dinp's rows [b,e); blocks nc .. 2nc-1: a slice of dweight (rows or
    // columns) and dbias's columns [ob,oe). The outputs are disjoint, so no block waits for
    // another.
    auto block = [&](int k) {
      if (k < nc) {
        size_t b = 0, e = 0;
        chunk_range(static_cast<size_t>(N), nc, k, b, e);
        if (e > b) {
          // dinp (N,IC) += dout (N,OC) · weight (OC,IC)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(e - b), IC, OC,
                      1.0f, dout + b * OC, OC, weight, IC, dinp_beta, dinp + b * IC, IC);
        }
        return;
      }
      k -= nc;
      if (dw_by_columns) {
        size_t ib = 0, ie = 0;
        chunk_range(static_cast<size_t>(IC), nc, k, ib, ie);
        if (ie > ib) {
          // dweight[:, ib:ie] (OC, ie-ib) += dout (N,OC)ᵀ · inp[:, ib:ie]
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, static_cast<int>(ie - ib), N,
                      1.0f, dout, OC, inp + ib, IC, 1.0f, dweight + ib, IC);
        }
      }
      size_t ob = 0, oe = 0;
      chunk_range(static_cast<size_t>(OC), nc, k, ob, oe);
      if (oe > ob) {
        if (!dw_by_columns) {
          // dweight (OC,IC) += dout (N,OC)ᵀ · inp (N,IC), rows [ob,oe)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(oe - ob), IC, N,
                      1.0f, dout + ob, OC, inp, IC, 1.0f, dweight + ob * IC, IC);
        }
        if (dbias != nullptr) column_sums_add(dbias, dout, N, OC, ob, oe);
      }
    };
    if (nc == 1) {
      block(0);
      block(1);
    } else {
      pool_.run(2 * nc, block);
    }
  }

  /// dbias[o] += Σ_n dout[n, o] for o in [ob, oe), each column summed in n order (vectorized
  /// across o, so the order is fixed whatever the vector width).
  static void column_sums_add(float* dbias, const float* dout, int N, int OC, size_t ob,
                              size_t oe) {
    const size_t w = oe - ob;
    std::vector<float> acc(w, 0.0f);
    float* a = acc.data();
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * OC + ob;
      for (size_t o = 0; o < w; ++o) a[o] += d[o];
    }
    for (size_t o = 0; o < w; ++o) dbias[ob + o] += a[o];
  }

  // ---- attention -----------------------------------------------------------------------------
  /// One (batch b, head h) pair of attention.
  struct attention_head {
    size_t p;       ///< b·NH + h: the pair's (T,T) block of att / scratch starts at p·T·T
    size_t qkv_at;  ///< offset of the head's query columns in a (B,T,3C) tensor
    size_t out_at;  ///< offset of the head's columns in a (B,T,C) tensor
    const float *q, *k, *v;  ///< the head's query, key, value columns of qkv (row stride 3C)
  };

  /// Calls fn(head) for every (batch, head) pair, in parallel chunks sized by the pair's work,
  /// flops_per_score · T·T·hs.
  template <class Fn>
  void for_each_head(const float* qkv, int B, int T, int C, int NH, int flops_per_score, Fn&& fn) {
    ensure_openblas_single_threaded();
    const int hs = C / NH;
    const int C3 = 3 * C;
    const size_t pairs = static_cast<size_t>(B) * NH;
    const size_t work = static_cast<size_t>(T) * T * hs * flops_per_score;
    // One chunk per pair when the work is worth threads at all: the pairs are claimed in turn,
    // so a thread that shares its core with another process takes fewer of them instead of the
    // other waiting for its half. Each pair writes only its own outputs (its columns of out or
    // dqkv, its block of att or scratch) with sums in a fixed order, so the split changes no bit.
    const int nc = chunks_for(pairs * work, 1 << 18) > 1 ? static_cast<int>(pairs) : 1;
    for_chunks(pairs, nc, [&](int, size_t pb, size_t pe) {
      for (size_t p = pb; p < pe; ++p) {
        const size_t b = p / NH, h = p % NH;
        const size_t qkv_at = b * T * C3 + h * hs;
        const float* q = qkv + qkv_at;
        fn(attention_head{p, qkv_at, b * T * C + h * hs, q, q + C, q + 2 * C});
      }
    });
  }

  // Attention's products (q·kᵀ, p·v and the four of the backward) are small per (batch, head):
  // T×T×hs with hs = 64 at the models trained here. They run in a register-tiled kernel of
  // this file (attn_tile) instead of sgemm: an sgemm call per 32-row block packs both operands
  // again for a few microseconds of arithmetic, and its NT form (q·kᵀ, dy·vᵀ) was the slowest
  // part. Each head's k and v (and, backward, q and dy) are first copied into contiguous,
  // column-padded buffers (kᵀ and vᵀ transposed), so every product reads its B operand as
  // contiguous 16-float rows and its A operand as broadcast scalars at any stride. The order of
  // every sum is fixed (k = 0, 1, ...), so results depend only on the shapes.
  static constexpr int attn_mr = 8;   ///< rows of a tile
  static constexpr int attn_nv = 2;   ///< 16-float vectors per tile row
  static constexpr int attn_nr = 32;  ///< columns of a tile (attn_nv · 16)
  using v16 = float __attribute__((vector_size(64)));

  static int round_up(int x, int m) { return (x + m - 1) / m * m; }

  /// c[i·ldc + j] = Σ_{k<K} A(i,k) · b[k·ldb + j] for i < attn_mr, j < attn_nr, with
  /// A(i,k) = a[min(i, m-1)·a_i + k·a_k] (rows past m repeat row m-1; the caller drops them).
  /// b's rows hold attn_nr readable floats from each b + k·ldb.
  static void attn_tile(const float* a, size_t a_i, size_t a_k, int m, const float* b, size_t ldb,
                        int K, float* c, size_t ldc) {
    const float* ar[attn_mr];
    for (int i = 0; i < attn_mr; ++i) ar[i] = a + static_cast<size_t>(std::min(i, m - 1)) * a_i;
    v16 acc[attn_mr][attn_nv];
    for (int i = 0; i < attn_mr; ++i)
      for (int v = 0; v < attn_nv; ++v) acc[i][v] = v16{};
    for (int k = 0; k < K; ++k) {
      v16 bv[attn_nv];
      const float* br = b + static_cast<size_t>(k) * ldb;
      for (int v = 0; v < attn_nv; ++v) std::memcpy(&bv[v], br + 16 * v, sizeof(v16));
      const size_t ak = static_cast<size_t>(k) * a_k;
      for (int i = 0; i < attn_mr; ++i) {
        const float s = ar[i][ak];
        for (int v = 0; v < attn_nv; ++v) acc[i][v] += s * bv[v];
      }
    }
    for (int i = 0; i < attn_mr; ++i)
      for (int v = 0; v < attn_nv; ++v)
        std::memcpy(c + static_cast<size_t>(i) * ldc + 16 * v, &acc[i][v], sizeof(v16));
  }

  /// Per-thread buffers of the attention kernels (grown, never shrunk; padding stays finite).
  struct attn_buffers {
    std::vector<float> t0, t1, p0, p1, c;
    static float* at_least(std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n, 0.0f);
      return v.data();
    }
  };
  static attn_buffers& attn_bufs() {
    thread_local attn_buffers b;
    return b;
  }

  /// dst (hs rows of stride ldt) = src (T rows of stride ld, hs columns)ᵀ, 16 rows of src at a
  /// time so that each dst row receives whole cache lines.
  static void transpose_head(float* dst, size_t ldt, const float* src, size_t ld, int T, int hs) {
    for (int t0 = 0; t0 < T; t0 += 16) {
      const int n = std::min(16, T - t0);
      const float* s = src + static_cast<size_t>(t0) * ld;
      for (int d = 0; d < hs; ++d) {
        float* o = dst + static_cast<size_t>(d) * ldt + t0;
        for (int i = 0; i < n; ++i) o[i] = s[static_cast<size_t>(i) * ld + d];
      }
    }
  }

  /// Row stride of a transposed (hs, T) head buffer: T rounded up to whole tiles, plus 16 floats
  /// so that its rows (read one after another by attn_tile) do not all fall in the same few L1
  /// sets, as a stride of a multiple of 1 KiB makes them.
  static size_t transposed_ld(int T) { return static_cast<size_t>(round_up(T, attn_nr)) + 16; }

  /// dst (T, Hp) = src (T rows of stride ld, hs columns).
  static void copy_head(float* dst, int Hp, const float* src, size_t ld, int T, int hs) {
    for (int t = 0; t < T; ++t)
      std::memcpy(dst + static_cast<size_t>(t) * Hp, src + static_cast<size_t>(t) * ld,
                  sizeof(float) * hs);
  }

  /// c (attn_mr rows, stride ldc) = A · b over `cols` columns of b, tile by tile.
  static void attn_rows(const float* a, size_t a_i, size_t a_k, int m, const float* b, size_t ldb,
                        int K, int cols, float* c, size_t ldc) {
    for (int j = 0; j < cols; j += attn_nr) attn_tile(a, a_i, a_k, m, b + j, ldb, K, c + j, ldc);
  }

  // causal: row t sees keys [0, t + 1); otherwise all T keys.
  void attention_fwd(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                     bool causal) override {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const size_t C3 = 3 * static_cast<size_t>(C);
    const int Tp = round_up(T, attn_nr), Hp = round_up(hs, attn_nr);
    const size_t ldt = transposed_ld(T);
    for_each_head(qkv, B, T, C, NH, 2, [&](const attention_head& x) {
      attn_buffers& buf = attn_bufs();
      float* kt = attn_buffers::at_least(buf.t0, static_cast<size_t>(hs) * ldt);
      float* vp = attn_buffers::at_least(buf.p0, static_cast<size_t>(T) * Hp);
      float* c = attn_buffers::at_least(buf.c, static_cast<size_t>(attn_mr) * std::max(Tp, Hp));
      transpose_head(kt, ldt, x.k, C3, T, hs);
      copy_head(vp, Hp, x.v, C3, T, hs);
      float* a = att + x.p * T * T;
      float* o = out + x.out_at;
      for (int r0 = 0; r0 < T; r0 += attn_mr) {
        const int m = std::min(attn_mr, T - r0);
        const int kl = causal ? r0 + m : T;  // keys the block's rows see
        // c[i, 0:kl] = q[r0+i] · kᵀ; then row t's probabilities over its keys into att.
        attn_rows(x.q + r0 * C3, C3, 1, m, kt, ldt, hs, kl, c, Tp);
        for (int i = 0; i < m; ++i) {
          const int t = r0 + i, len = causal ? t + 1 : T;
          float* ci = c + static_cast<size_t>(i) * Tp;
          for (int j = 0; j < len; ++j) ci[j] *= scale;
          float* ar = a + static_cast<size_t>(t) * T;
          softmax_row(ar, ci, len);
          for (int j = len; j < T; ++j) ar[j] = 0.0f;
        }
        // out[r0+i] = att[r0+i, 0:kl] · v[0:kl] (att is 0 past each row's keys).
        attn_rows(a + static_cast<size_t>(r0) * T, T, 1, m, vp, Hp, kl, Hp, c, Hp);
        for (int i = 0; i < m; ++i)
          std::memcpy(o + static_cast<size_t>(r0 + i) * C, c + static_cast<size_t>(i) * Hp,
                      sizeof(float) * hs);
      }
    });
  }

  /// p[0..len) ← softmax(z[0..len)) (p may be z). Returns {max of z, Σ exp(z - max)}.
  static std::pair<float, float> softmax_row(float* p, const float* z, int len) {
    float maxv = z[0];
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < len; ++i) maxv = z[i] > maxv ? z[i] : maxv;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < len; ++i) {
      const float e = fast_expf(z[i] - maxv);
      p[i] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < len; ++i) p[i] *= inv;
    return {maxv, sum};
  }

  void attention_bwd(float* dqkv, float* scratch, const float* dout, const float* qkv,
                     const float* att, int B, int T, int C, int NH, bool causal) override {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const size_t C3 = 3 * static_cast<size_t>(C);
    const int Tp = round_up(T, attn_nr), Hp = round_up(hs, attn_nr);
    const size_t ldt = transposed_ld(T);
    for_each_head(qkv, B, T, C, NH, 4, [&](const attention_head& x) {
      attn_buffers& buf = attn_bufs();
      float* vt = attn_buffers::at_least(buf.t0, static_cast<size_t>(hs) * ldt);
      float* kp = attn_buffers::at_least(buf.p0, static_cast<size_t>(T) * Hp);
      float* qp = attn_buffers::at_least(buf.p1, static_cast<size_t>(T) * Hp);
      float* dyp = attn_buffers::at_least(buf.t1, static_cast<size_t>(T) * Hp);
      float* c = attn_buffers::at_least(buf.c, static_cast<size_t>(attn_mr) * std::max(Tp, Hp));
      const float* dy = dout + x.out_at;
      transpose_head(vt, ldt, x.v, C3, T, hs);
      copy_head(kp, Hp, x.k, C3, T, hs);
      copy_head(qp, Hp, x.q, C3, T, hs);
      copy_head(dyp, Hp, dy, C, T, hs);
      float* dq = dqkv + x.qkv_at;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + x.p * T * T;
      float* ds = scratch + x.p * T * T;
      // Rows of att / ds: dpre = softmax backward of dy·vᵀ, then dq += dpre · k.
      for (int r0 = 0; r0 < T; r0 += attn_mr) {
        const int m = std::min(attn_mr, T - r0);
        const int kl = causal ? r0 + m : T;
        attn_rows(dy + static_cast<size_t>(r0) * C, C, 1, m, vt, ldt, hs, kl, c, Tp);
        for (int i = 0; i < m; ++i) {
          const int t = r0 + i, len = causal ? t + 1 : T;
          const float* ar = a + static_cast<size_t>(t) * T;
          const float* dp = c + static_cast<size_t>(i) * Tp;
          float* dr = ds + static_cast<size_t>(t) * T;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int j = 0; j < len; ++j) s += ar[j] * dp[j];
          for (int j = 0; j < len; ++j) dr[j] = scale * ar[j] * (dp[j] - s);
          // Zeros only as far as the products below read: columns [0, kl) of these rows.
          for (int j = len; j < kl; ++j) dr[j] = 0.0f;
        }
        attn_rows(ds + static_cast<size_t>(r0) * T, T, 1, m, kp, Hp, kl, Hp, c, Hp);
        add_rows(dq + r0 * C3, C3, c, Hp, m, hs);
      }
      // Columns of att / ds (the keys): dv += attᵀ · dy and dk += dpreᵀ · q, over the rows that
      // see each key block (from its first key on when causal: earlier rows hold zeros there).
      for (int j0 = 0; j0 < T; j0 += attn_mr) {
        const int m = std::min(attn_mr, T - j0);
        const int t0 = causal ? j0 : 0;
        const size_t off = static_cast<size_t>(t0) * T + j0;
        attn_rows(a + off, 1, T, m, dyp + static_cast<size_t>(t0) * Hp, Hp, T - t0, Hp, c, Hp);
        add_rows(dv + j0 * C3, C3, c, Hp, m, hs);
        attn_rows(ds + off, 1, T, m, qp + static_cast<size_t>(t0) * Hp, Hp, T - t0, Hp, c, Hp);
        add_rows(dk + j0 * C3, C3, c, Hp, m, hs);
      }
    });
  }

  /// dst[i·ld + d] += c[i·ldc + d] for i < m, d < hs.
  static void add_rows(float* dst, size_t ld, const float* c, size_t ldc, int m, int hs) {
    for (int i = 0; i < m; ++i) {
      float* d = dst + static_cast<size_t>(i) * ld;
      const float* s = c + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < hs; ++j) d[j] += s[j];
    }
  }

  // ---- GELU, residual ------------------------------------------------------------------------
  void gelu_forward(float* out, const float* inp, size_t N) override {
    parallel_range(N, 8, [&](size_t b, size_t e) {
    // 0.5 x (1 + tanh u) = x · sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³).
#pragma omp simd
      for (size_t i = b; i < e; ++i) {
        const float x = inp[i];
        const float u = gelu_k * (x + gelu_c * x * x * x);
        out[i] = x * fast_sigmoidf(2.0f * u);
      }
    });
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) override {
    gelu_bwd<true>(dinp, inp, dout, N);
  }

  void gelu_backward_writes(float* dinp, const float* inp, const float* dout, size_t N) override {
    gelu_bwd<false>(dinp, inp, dout, N);
  }

  /// dinp (+)= dout * gelu'(inp). Writing gives the bits of adding to +0 (0 + y == y for every
  /// y but -0, whose sign no later op depends on).
  template <bool accumulate>
  void gelu_bwd(float* dinp, const float* inp, const float* dout, size_t N) {
    parallel_range(N, 8, [&](size_t b, size_t e) {
    // With s = sigmoid(2u): tanh u = 2s - 1, 1 - tanh²u = 4 s (1 - s), so
    // gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3·0.044715 x²).
#pragma omp simd
      for (size_t i = b; i < e; ++i) {
        const float x = inp[i];
        const float u = gelu_k * (x + gelu_c * x * x * x);
        const float s = fast_sigmoidf(2.0f * u);
        const float g = s + 2.0f * x * s * (1.0f - s) * gelu_k * (1.0f + 3.0f * gelu_c * x * x);
        if constexpr (accumulate)
          dinp[i] += g * dout[i];
        else
          dinp[i] = g * dout[i];
      }
    });
  }

  void residual_forward(float* out, const float* a, const float* b, size_t N) override {
    parallel_range(N, 1, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
    });
  }

  // ---- loss ----------------------------------------------------------------------------------
  void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int N, int V) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(V) * 8, [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n) {
        const float* z = logits + n * V;
        float* p = probs + n * V;
        const auto [maxv, sum] = softmax_row(p, z, V);
        // -log softmax(z)[y] = log Σ exp(z - max) + max - z[y]
        losses[n] = std::log(sum) + maxv - z[targets[n]];
      }
    });
  }

  void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                     float dloss, int N, int V) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(V), [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n) {
        const float* p = probs + n * V;
        float* d = dlogits + n * V;
        for (int v = 0; v < V; ++v) d[v] = dloss * p[v];
        d[targets[n]] = dloss * (p[targets[n]] - 1.0f);
      }
    });
  }

  // ---- mixture of experts -------------------------------------------------------------------
  void router_forward(float* probs, int32_t* idx, float* gates, const float* logits, int N, int E,
                      int k) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(E) * 8, [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n) {
        const float* z = logits + n * E;
        float* p = probs + n * E;
        // The same choice as the reference (both select on the same logits).
        const int first = detail::router_first(z, E);
        const float maxv = z[first];
        float sum = 0.0f;
        for (int x = 0; x < E; ++x) {
          p[x] = fast_expf(z[x] - maxv);
          sum += p[x];
        }
        const float inv = 1.0f / sum;
        for (int x = 0; x < E; ++x) p[x] *= inv;
        idx[n * k] = first;
        if (k == 1) {
          gates[n] = p[first];
          continue;
        }
        const int second = detail::router_second(z, E, first);
        idx[n * 2 + 1] = second;
        const float s = p[first] + p[second];
        gates[n * 2] = p[first] / s;
        gates[n * 2 + 1] = p[second] / s;
      }
    });
  }

  void router_backward(float* dlogits, const float* dgates, const float* dprobs, const float* probs,
                       const int32_t* idx, int N, int E, int k) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(E) * 4, [&](size_t b, size_t e) {
      std::vector<float> dp(static_cast<size_t>(E));
      for (size_t n = b; n < e; ++n) {
        const float* p = probs + n * E;
        for (int x = 0; x < E; ++x) dp[x] = dprobs != nullptr ? dprobs[n * E + x] : 0.0f;
        if (k == 1) {
          dp[idx[n]] += dgates[n];
        } else {
          const int a = idx[n * 2], c = idx[n * 2 + 1];
          const float pa = p[a], pc = p[c], s2 = (pa + pc) * (pa + pc);
          const float ga = dgates[n * 2], gc = dgates[n * 2 + 1];
          dp[a] += pc * (ga - gc) / s2;
          dp[c] += pa * (gc - ga) / s2;
        }
        float dot = 0.0f;
        for (int x = 0; x < E; ++x) dot += p[x] * dp[x];
        for (int x = 0; x < E; ++x) dlogits[n * E + x] += p[x] * (dp[x] - dot);
      }
    });
  }

  void moe_assign(int32_t* slot_token, int32_t* assign, int32_t* routed, const int32_t* idx, int N,
                  int E, int k, int capacity) override {
    // Sequential by definition (batch order decides who is dropped); N·k integer steps.
    std::vector<int> used(static_cast<size_t>(E), 0);
    std::fill(slot_token, slot_token + static_cast<size_t>(E) * capacity, -1);
    std::fill(routed, routed + E, 0);
    const size_t NK = static_cast<size_t>(N) * k;
    for (size_t c = 0; c < NK; ++c) {
      const int x = idx[c];
      ++routed[x];
      if (used[x] < capacity) {
        const int row = x * capacity + used[x]++;
        slot_token[row] = static_cast<int32_t>(c / static_cast<size_t>(k));
        assign[c] = row;
      } else {
        assign[c] = -1;
      }
    }
  }

  void moe_gather(float* out, const float* inp, const int32_t* slot_token, int rows,
                  int C) override {
    parallel_range(static_cast<size_t>(rows), static_cast<size_t>(C), [&](size_t b, size_t e) {
      for (size_t r = b; r < e; ++r) {
        float* o = out + r * C;
        const int n = slot_token[r];
        if (n < 0)
          std::fill(o, o + C, 0.0f);
        else
          std::copy(inp + static_cast<size_t>(n) * C, inp + static_cast<size_t>(n + 1) * C, o);
      }
    });
  }

  void moe_gather_backward(float* dinp, const float* dout, const int32_t* assign, int N, int k,
                           int C) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(C) * k, [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n) {
        float* d = dinp + n * C;
        for (int j = 0; j < k; ++j) {
          const int r = assign[n * k + j];
          if (r < 0) continue;
          const float* src = dout + static_cast<size_t>(r) * C;
          for (int c = 0; c < C; ++c) d[c] += src[c];
        }
      }
    });
  }

  void moe_scatter(float* out, const float* expert_out, const int32_t* assign, const float* gates,
                   int N, int k, int C) override {
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(C) * k, [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n) {
        float* o = out + n * C;
        std::fill(o, o + C, 0.0f);
        for (int j = 0; j < k; ++j) {
          const int r = assign[n * k + j];
          if (r < 0) continue;
          const float g = gates[n * k + j];
          const float* y = expert_out + static_cast<size_t>(r) * C;
          for (int c = 0; c < C; ++c) o[c] += g * y[c];
        }
      }
    });
  }

  void moe_scatter_backward(float* dexpert_out, float* dgates, const float* dout,
                            const float* expert_out, const int32_t* assign, const float* gates,
                            int N, int k, int C) override {
    // Every expert row belongs to at most one (n, j): chunks over n never write the same row.
    parallel_range(static_cast<size_t>(N), static_cast<size_t>(C) * k, [&](size_t b, size_t e) {
      for (size_t n = b; n < e; ++n) {
        const float* d = dout + n * C;
        for (int j = 0; j < k; ++j) {
          const size_t i = n * k + j;
          if (assign[i] < 0) continue;
          float* de = dexpert_out + static_cast<size_t>(assign[i]) * C;
          const float* y = expert_out + static_cast<size_t>(assign[i]) * C;
          const float g = gates[i];
          float dot = 0.0f;
          for (int c = 0; c < C; ++c) {
            de[c] += g * d[c];
            dot += d[c] * y[c];
          }
          dgates[i] += dot;
        }
      }
    });
  }

  // ---- optimizer -----------------------------------------------------------------------------
  /// AdamW's per-step constants in float.
  struct adamw_consts {
    float b1, b2, inv_bc1, inv_bc2, lr, eps;
    explicit adamw_consts(const adamw_params& p)
        : b1(p.beta1),
          b2(p.beta2),
          inv_bc1(static_cast<float>(1.0 / (1.0 - std::pow(double(p.beta1), double(p.step))))),
          inv_bc2(static_cast<float>(1.0 / (1.0 - std::pow(double(p.beta2), double(p.step))))),
          lr(p.lr),
          eps(p.eps) {}
  };

  /// AdamW over elements [lo, hi), each gradient taken as float(gs · g) when `scaled`.
  /// Element-wise: vectorized (GCC leaves the loop scalar on its own); sqrt and division are
  /// correctly rounded in either form, so the bits are those of the scalar loop.
  template <bool scaled>
  static void adamw_run(float* params, const float* grads, float* m, float* v, size_t lo, size_t hi,
                        const adamw_consts& k, float wd, float gs) {
    const float b1 = k.b1, b2 = k.b2, inv_bc1 = k.inv_bc1, inv_bc2 = k.inv_bc2, lr = k.lr,
                eps = k.eps;
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      float g = grads[i];
      if constexpr (scaled) g = g * gs;
      const float mi = b1 * m[i] + (1.0f - b1) * g;
      const float vi = b2 * v[i] + (1.0f - b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      const float theta = params[i];
      params[i] = theta - lr * ((mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps) + wd * theta);
    }
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const adamw_params& p) override {
    const adamw_consts k(p);
    parallel_range(n, 8, [&](size_t lo, size_t hi) {
      adamw_run<false>(params, grads, m, v, lo, hi, k, p.weight_decay, 1.0f);
    });
  }

  // One pass over all segments (one fork-join instead of one per segment, and the clip factor
  // applied as the gradients are read instead of in a pass of its own); grads stay unchanged.
  // Chunks cut the concatenated segments, so a chunk may span several of them.
  void adamw_update_segments(float* params, float* grads, float* m, float* v,
                             const adamw_segment* segments, size_t count, float grad_scale,
                             const adamw_params& p) override {
    std::vector<size_t> start(count + 1, 0);
    for (size_t s = 0; s < count; ++s) start[s + 1] = start[s] + segments[s].n;
    const adamw_consts k(p);
    const bool scaled = grad_scale != 1.0f;
    parallel_range(start[count], 8, [&](size_t lo, size_t hi) {
      // The last segment starting at or before lo (empty segments are stepped over below).
      size_t s =
          static_cast<size_t>(std::upper_bound(start.begin(), start.end(), lo) - start.begin()) - 1;
      for (; lo < hi; ++s) {
        const adamw_segment& seg = segments[s];
        const size_t b = lo - start[s], e = std::min(hi, start[s + 1]) - start[s];
        const size_t o = seg.offset;
        if (scaled) {
          adamw_run<true>(params + o, grads + o, m + o, v + o, b, e, k, seg.weight_decay,
                          grad_scale);
        } else {
          adamw_run<false>(params + o, grads + o, m + o, v + o, b, e, k, seg.weight_decay, 1.0f);
        }
        lo = start[s] + e;
      }
    });
  }

  double sum_squares(const float* x, size_t n) override {
    const int nc = chunks_in_turn(n);
    std::vector<double> partial(nc, 0.0);
    for_chunks(n, nc, [&](int chunk, size_t lo, size_t hi) {
      double acc = 0.0;
#pragma omp simd reduction(+ : acc)
      for (size_t i = lo; i < hi; ++i) acc += double(x[i]) * double(x[i]);
      partial[chunk] = acc;
    });
    double total = 0.0;
    for (double s : partial) total += s;  // chunk order: deterministic
    return total;
  }

  void scale(float* x, float s, size_t n) override {
    parallel_range(n, 1, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) x[i] *= s;
    });
  }

  bool all_finite(const float* x, size_t n) override {
    const int nc = chunks_in_turn(n);
    std::vector<int> bad(nc, 0);
    for_chunks(n, nc, [&](int chunk, size_t lo, size_t hi) {
      // A float is inf or NaN exactly when its exponent bits are all ones.
      uint32_t any = 0;
      for (size_t i = lo; i < hi; ++i) {
        uint32_t u;
        std::memcpy(&u, x + i, sizeof u);
        any |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
      }
      bad[chunk] = static_cast<int>(any);
    });
    for (int b : bad) {
      if (b != 0) return false;
    }
    return true;
  }

  // ---- syncer math ---------------------------------------------------------------------------
  void weighted_sum(float* out, const float* const* inputs, const float* weights, int k,
                    size_t n) override {
    parallel_range(n, static_cast<size_t>(std::max(k, 1)), [&](size_t lo, size_t hi) {
      if (k == 0) {
        std::fill(out + lo, out + hi, 0.0f);
        return;
      }
      const float w0 = weights[0];
      const float* in0 = inputs[0];
      for (size_t i = lo; i < hi; ++i) out[i] = w0 * in0[i];
      for (int j = 1; j < k; ++j) {
        const float wj = weights[j];
        const float* inj = inputs[j];
        for (size_t i = lo; i < hi; ++i) out[i] += wj * inj[i];
      }
    });
  }

  void axpy(float* y, float a, const float* x, size_t n) override {
    parallel_range(n, 1, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) y[i] += a * x[i];
    });
  }

  void nesterov_update(float* theta, float* momentum, const float* delta, float lr, float mu,
                       size_t n) override {
    parallel_range(n, 2, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) {
        const float b = mu * momentum[i] + delta[i];
        momentum[i] = b;
        theta[i] -= lr * (delta[i] + mu * b);
      }
    });
  }

  // The fused merge loops walk [0, n) in blocks of merge_block floats (16 KB, L1-resident): each
  // block's weighted sum is formed in place (out, or a stack buffer), its Σ d² taken while it is
  // hot, and the Nesterov step applied from it, so every input is read once. Per-element float
  // math is the same expressions as weighted_sum / scale / nesterov_update above; the double
  // Σ d² is one partial per block, added in block order, so the sum does not depend on threads.
  static constexpr size_t merge_block = 4096;

  /// o[0, len) = Σ_j w_j in_j[lo, lo + len) (weighted_sum's order); returns Σ o².
  static double weighted_block(float* o, const float* const* inputs, const float* weights, int k,
                               size_t lo, size_t len) {
    const float w0 = weights[0];
    const float* in0 = inputs[0] + lo;
    for (size_t i = 0; i < len; ++i) o[i] = w0 * in0[i];
    for (int j = 1; j < k; ++j) {
      const float wj = weights[j];
      const float* inj = inputs[j] + lo;
      for (size_t i = 0; i < len; ++i) o[i] += wj * inj[i];
    }
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = 0; i < len; ++i) acc += double(o[i]) * double(o[i]);
    return acc;
  }

  /// Runs f(block, lo, hi) for every merge_block of [0, n) on the pool (contiguous runs of blocks
  /// per chunk) and returns the sum of the blocks' results in block order.
  template <class F>
  double over_merge_blocks(size_t n, size_t work_per_item, F&& f) const {
    const size_t blocks = (n + merge_block - 1) / merge_block;
    if (blocks == 0) return 0.0;
    std::vector<double> partial(blocks, 0.0);
    const int nc = static_cast<int>(std::min<size_t>(chunks_for(n * work_per_item), blocks));
    for_chunks(blocks, nc, [&](int, size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        const size_t lo = b * merge_block;
        partial[b] = f(lo, std::min(n, lo + merge_block));
      }
    });
    double total = 0.0;
    for (double s : partial) total += s;
    return total;
  }

  double weighted_sum_sq(float* out, const float* const* inputs, const float* weights, int k,
                         size_t n) override {
    if (k <= 0) {
      std::fill(out, out + n, 0.0f);
      return 0.0;
    }
    return over_merge_blocks(n, static_cast<size_t>(k), [&](size_t lo, size_t hi) {
      return weighted_block(out + lo, inputs, weights, k, lo, hi - lo);
    });
  }

  double weighted_sum_nesterov(float* theta, float* momentum, const float* const* inputs,
                               const float* weights, int k, float delta_scale, float lr, float mu,
                               size_t n) override {
    if (k <= 0) throw backend_error("weighted_sum_nesterov: no inputs");
    return over_merge_blocks(n, static_cast<size_t>(k) + 4, [&](size_t lo, size_t hi) {
      alignas(64) float d[merge_block];
      const size_t len = hi - lo;
      const double sq = weighted_block(d, inputs, weights, k, lo, len);
      if (delta_scale != 1.0f) {
        for (size_t i = 0; i < len; ++i) d[i] *= delta_scale;
      }
      float* th = theta + lo;
      float* mo = momentum + lo;
      for (size_t i = 0; i < len; ++i) {
        const float b = mu * mo[i] + d[i];
        mo[i] = b;
        th[i] -= lr * (d[i] + mu * b);
      }
      return sq;
    });
  }

 private:
  int threads_;
  mutable cpu_detail::thread_pool pool_;
};

}  // namespace

std::unique_ptr<backend> make_cpu_backend(const backend_options& opts) {
  if (opts.threads < 0) {
    throw backend_error(
        "make_cpu_backend: backend_options.threads must be >= 0 (0 = hardware "
        "threads), got " +
        std::to_string(opts.threads));
  }
  int threads = opts.threads;
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<cpu_backend>(threads);
}

}  // namespace dd::kernels
