// kernels/reference/reference_backend.cpp — naive, obviously-correct implementations of every
// backend op. Formulas follow the doc comments in backend.hpp (llm.c's layouts); every sum is
// accumulated in double and rounded to float once, at the store.
#include "kernels/reference/reference_backend.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/detail/host_backend.hpp"

namespace dd::kernels {
namespace {

constexpr double layernorm_eps = 1e-5;
// sqrt(2/pi), the GELU tanh approximation's constant (Hendrycks & Gimpel 2016, sec. 2).
const double gelu_scale = std::sqrt(2.0 / 3.14159265358979323846);

class reference_backend final : public detail::host_backend {
 public:
  std::string name() const override { return "reference"; }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) override {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* te = wte + static_cast<size_t>(tokens[b * T + t]) * C;
        const float* pe = wpe + static_cast<size_t>(t) * C;
        float* o = out + (static_cast<size_t>(b) * T + t) * C;
        for (int c = 0; c < C; ++c) o[c] = static_cast<float>(double(te[c]) + double(pe[c]));
      }
    }
  }

  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) override {
    // Accumulate each destination row's total in double, in (b,t) order, then add it once.
    const int V_seen = [&] {
      int v = 0;
      for (int i = 0; i < B * T; ++i) v = std::max(v, tokens[i] + 1);
      return v;
    }();
    std::vector<double> acc_te(static_cast<size_t>(V_seen) * C, 0.0);
    std::vector<bool> touched(V_seen, false);
    std::vector<double> acc_pe(static_cast<size_t>(T) * C, 0.0);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const int tok = tokens[b * T + t];
        touched[tok] = true;
        const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
        for (int c = 0; c < C; ++c) {
          acc_te[static_cast<size_t>(tok) * C + c] += d[c];
          acc_pe[static_cast<size_t>(t) * C + c] += d[c];
        }
      }
    }
    for (int v = 0; v < V_seen; ++v) {
      if (!touched[v]) continue;
      for (int c = 0; c < C; ++c) {
        float& g = dwte[static_cast<size_t>(v) * C + c];
        g = static_cast<float>(g + acc_te[static_cast<size_t>(v) * C + c]);
      }
    }
    for (size_t i = 0; i < static_cast<size_t>(T) * C; ++i) {
      dwpe[i] = static_cast<float>(dwpe[i] + acc_pe[i]);
    }
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) override {
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      double m = 0;
      for (int c = 0; c < C; ++c) m += x[c];
      m /= C;
      double var = 0;
      for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
      var /= C;  // biased variance, as in Ba et al. 2016 and torch.nn.LayerNorm
      const double s = 1.0 / std::sqrt(var + layernorm_eps);
      float* o = out + static_cast<size_t>(n) * C;
      for (int c = 0; c < C; ++c) {
        o[c] = static_cast<float>((x[c] - m) * s * weight[c] + bias[c]);
      }
      mean[n] = static_cast<float>(m);
      rstd[n] = static_cast<float>(s);
    }
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    std::vector<double> dw(C, 0.0), db(C, 0.0);
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      const double m = mean[n], s = rstd[n];
      // d/dx of y = w*xhat + b, xhat = (x - mean) * rstd:
      // dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy*xhat)).
      double mean_g = 0, mean_gx = 0;
      for (int c = 0; c < C; ++c) {
        const double xhat = (x[c] - m) * s;
        const double g = double(weight[c]) * dy[c];
        mean_g += g;
        mean_gx += g * xhat;
      }
      mean_g /= C;
      mean_gx /= C;
      float* dx = dinp + static_cast<size_t>(n) * C;
      for (int c = 0; c < C; ++c) {
        const double xhat = (x[c] - m) * s;
        const double g = double(weight[c]) * dy[c];
        db[c] += dy[c];
        dw[c] += xhat * dy[c];
        dx[c] = static_cast<float>(dx[c] + (g - mean_g - xhat * mean_gx) * s);
      }
    }
    for (int c = 0; c < C; ++c) {
      dweight[c] = static_cast<float>(dweight[c] + dw[c]);
      dbias[c] = static_cast<float>(dbias[c] + db[c]);
    }
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int IC, int OC) override {
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < OC; ++o) {
        double acc = bias != nullptr ? double(bias[o]) : 0.0;
        for (int i = 0; i < IC; ++i) {
          acc += double(inp[static_cast<size_t>(n) * IC + i]) *
                 weight[static_cast<size_t>(o) * IC + i];
        }
        out[static_cast<size_t>(n) * OC + o] = static_cast<float>(acc);
      }
    }
  }

  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int IC, int OC) override {
    // dinp[n,i] += Σ_o dout[n,o] * weight[o,i]
    for (int n = 0; n < N; ++n) {
      for (int i = 0; i < IC; ++i) {
        double acc = 0;
        for (int o = 0; o < OC; ++o) {
          acc += double(dout[static_cast<size_t>(n) * OC + o]) *
                 weight[static_cast<size_t>(o) * IC + i];
        }
        float& d = dinp[static_cast<size_t>(n) * IC + i];
        d = static_cast<float>(d + acc);
      }
    }
    // dweight[o,i] += Σ_n dout[n,o] * inp[n,i]
    for (int o = 0; o < OC; ++o) {
      for (int i = 0; i < IC; ++i) {
        double acc = 0;
        for (int n = 0; n < N; ++n) {
          acc +=
              double(dout[static_cast<size_t>(n) * OC + o]) * inp[static_cast<size_t>(n) * IC + i];
        }
        float& d = dweight[static_cast<size_t>(o) * IC + i];
        d = static_cast<float>(d + acc);
      }
    }
    if (dbias != nullptr) {
      for (int o = 0; o < OC; ++o) {
        double acc = 0;
        for (int n = 0; n < N; ++n) acc += dout[static_cast<size_t>(n) * OC + o];
        dbias[o] = static_cast<float>(dbias[o] + acc);
      }
    }
  }

  // Position t attends to keys [0, causal ? t + 1 : T).
  void attention_fwd(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                     bool causal) override {
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt(double(hs));
    const size_t C3 = static_cast<size_t>(3) * C;
    std::vector<double> p(T);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const int kend = causal ? t + 1 : T;
          const float* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
          double maxv = -INFINITY;
          for (int t2 = 0; t2 < kend; ++t2) {
            const float* k = qkv + (static_cast<size_t>(b) * T + t2) * C3 + C + h * hs;
            double dot = 0;
            for (int i = 0; i < hs; ++i) dot += double(q[i]) * k[i];
            p[t2] = dot * scale;
            maxv = std::max(maxv, p[t2]);
          }
          double sum = 0;
          for (int t2 = 0; t2 < kend; ++t2) {
            p[t2] = std::exp(p[t2] - maxv);
            sum += p[t2];
          }
          float* a = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
          for (int t2 = 0; t2 < T; ++t2) {
            a[t2] = t2 < kend ? static_cast<float>(p[t2] / sum) : 0.0f;
          }
          float* o = out + (static_cast<size_t>(b) * T + t) * C + h * hs;
          for (int i = 0; i < hs; ++i) {
            double acc = 0;
            for (int t2 = 0; t2 < kend; ++t2) {
              const float* v = qkv + (static_cast<size_t>(b) * T + t2) * C3 + 2 * C + h * hs;
              acc += (p[t2] / sum) * v[i];
            }
            o[i] = static_cast<float>(acc);
          }
        }
      }
    }
  }

  void attention_bwd(float* dqkv, float* scratch, const float* dout, const float* qkv,
                     const float* att, int B, int T, int C, int NH, bool causal) override {
    (void)scratch;  // the reference keeps its own double-precision workspace
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt(double(hs));
    const size_t C3 = static_cast<size_t>(3) * C;
    const size_t n_all = static_cast<size_t>(B) * T * C3;
    std::vector<double> d(n_all, 0.0);  // gradient w.r.t. qkv, accumulated in double
    std::vector<double> datt(T), dpre(T);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const int kend = causal ? t + 1 : T;
          const float* a = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
          const float* dy = dout + (static_cast<size_t>(b) * T + t) * C + h * hs;
          const size_t qoff = (static_cast<size_t>(b) * T + t) * C3 + h * hs;
          // out[t] = Σ_t2 a[t2] v[t2]  →  datt[t2] = dy·v[t2];  dv[t2] += a[t2] dy.
          for (int t2 = 0; t2 < kend; ++t2) {
            const size_t voff = (static_cast<size_t>(b) * T + t2) * C3 + 2 * C + h * hs;
            double dot = 0;
            for (int i = 0; i < hs; ++i) {
              dot += double(dy[i]) * qkv[voff + i];
              d[voff + i] += double(a[t2]) * dy[i];
            }
            datt[t2] = dot;
          }
          // softmax backward: dpre[t2] = a[t2] (datt[t2] - Σ_j a[j] datt[j]).
          double s = 0;
          for (int t2 = 0; t2 < kend; ++t2) s += double(a[t2]) * datt[t2];
          for (int t2 = 0; t2 < kend; ++t2) dpre[t2] = double(a[t2]) * (datt[t2] - s);
          // pre[t2] = scale q·k[t2]  →  dq += scale dpre[t2] k[t2]; dk[t2] += scale dpre[t2] q.
          for (int t2 = 0; t2 < kend; ++t2) {
            const size_t koff = (static_cast<size_t>(b) * T + t2) * C3 + C + h * hs;
            for (int i = 0; i < hs; ++i) {
              d[qoff + i] += scale * dpre[t2] * qkv[koff + i];
              d[koff + i] += scale * dpre[t2] * qkv[qoff + i];
            }
          }
        }
      }
    }
    for (size_t i = 0; i < n_all; ++i) dqkv[i] = static_cast<float>(dqkv[i] + d[i]);
  }

  void gelu_forward(float* out, const float* inp, size_t N) override {
    for (size_t i = 0; i < N; ++i) {
      const double x = inp[i];
      out[i] =
          static_cast<float>(0.5 * x * (1.0 + std::tanh(gelu_scale * (x + 0.044715 * x * x * x))));
    }
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) override {
    for (size_t i = 0; i < N; ++i) {
      const double x = inp[i];
      const double u = gelu_scale * (x + 0.044715 * x * x * x);
      const double th = std::tanh(u);
      const double sech2 = 1.0 - th * th;
      const double grad =
          0.5 * (1.0 + th) + 0.5 * x * sech2 * gelu_scale * (1.0 + 3.0 * 0.044715 * x * x);
      dinp[i] = static_cast<float>(dinp[i] + grad * dout[i]);
    }
  }

  void residual_forward(float* out, const float* a, const float* b, size_t N) override {
    for (size_t i = 0; i < N; ++i) out[i] = static_cast<float>(double(a[i]) + double(b[i]));
  }

  void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int N, int V) override {
    for (int n = 0; n < N; ++n) {
      const float* z = logits + static_cast<size_t>(n) * V;
      double maxv = -INFINITY;
      for (int v = 0; v < V; ++v) maxv = std::max(maxv, double(z[v]));
      double sum = 0;
      for (int v = 0; v < V; ++v) sum += std::exp(z[v] - maxv);
      float* p = probs + static_cast<size_t>(n) * V;
      for (int v = 0; v < V; ++v) p[v] = static_cast<float>(std::exp(z[v] - maxv) / sum);
      // -log softmax(z)[y] = log Σ exp(z - max) + max - z[y]
      losses[n] = static_cast<float>(std::log(sum) + maxv - z[targets[n]]);
    }
  }

  void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                     float dloss, int N, int V) override {
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < V; ++v) {
        const size_t i = static_cast<size_t>(n) * V + v;
        const double indicator = v == targets[n] ? 1.0 : 0.0;
        dlogits[i] = static_cast<float>(double(dloss) * (double(probs[i]) - indicator));
      }
    }
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const adamw_params& p) override {
    const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
    const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
    for (size_t i = 0; i < n; ++i) {
      const double g = grads[i];
      const double mi = double(p.beta1) * m[i] + (1.0 - double(p.beta1)) * g;
      const double vi = double(p.beta2) * v[i] + (1.0 - double(p.beta2)) * g * g;
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
      const double mhat = mi / bc1;
      const double vhat = vi / bc2;
      const double theta = params[i];
      params[i] =
          static_cast<float>(theta - double(p.lr) * (mhat / (std::sqrt(vhat) + double(p.eps)) +
                                                     double(p.weight_decay) * theta));
    }
  }

  double sum_squares(const float* x, size_t n) override {
    double acc = 0;
    for (size_t i = 0; i < n; ++i) acc += double(x[i]) * x[i];
    return acc;
  }

  void scale(float* x, float s, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] * s;
  }

  bool all_finite(const float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i])) return false;
    }
    return true;
  }

  void weighted_sum(float* out, const float* const* inputs, const float* weights, int k,
                    size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int j = 0; j < k; ++j) acc += double(weights[j]) * inputs[j][i];
      out[i] = static_cast<float>(acc);
    }
  }

  void axpy(float* y, float a, const float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(y[i] + double(a) * x[i]);
  }

  // ---- mixture of experts ----
  void router_forward(float* probs, int32_t* idx, float* gates, const float* logits, int N, int E,
                      int k) override {
    for (int n = 0; n < N; ++n) {
      const float* z = logits + static_cast<size_t>(n) * E;
      float* p = probs + static_cast<size_t>(n) * E;
      double maxv = -INFINITY;
      for (int e = 0; e < E; ++e) maxv = std::max(maxv, double(z[e]));
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += std::exp(z[e] - maxv);
      for (int e = 0; e < E; ++e) p[e] = static_cast<float>(std::exp(z[e] - maxv) / sum);
      const int first = detail::router_first(z, E);
      idx[static_cast<size_t>(n) * k] = first;
      if (k == 1) {
        gates[n] = p[first];
        continue;
      }
      const int second = detail::router_second(z, E, first);
      idx[static_cast<size_t>(n) * 2 + 1] = second;
      const double s = double(p[first]) + double(p[second]);
      gates[static_cast<size_t>(n) * 2] = static_cast<float>(p[first] / s);
      gates[static_cast<size_t>(n) * 2 + 1] = static_cast<float>(p[second] / s);
    }
  }

  void router_backward(float* dlogits, const float* dgates, const float* dprobs, const float* probs,
                       const int32_t* idx, int N, int E, int k) override {
    std::vector<double> dp(static_cast<size_t>(E));
    for (int n = 0; n < N; ++n) {
      const float* p = probs + static_cast<size_t>(n) * E;
      for (int e = 0; e < E; ++e)
        dp[e] = dprobs != nullptr ? double(dprobs[static_cast<size_t>(n) * E + e]) : 0.0;
      if (k == 1) {
        dp[idx[n]] += dgates[n];
      } else {
        const int a = idx[static_cast<size_t>(n) * 2], b = idx[static_cast<size_t>(n) * 2 + 1];
        const double pa = p[a], pb = p[b], s = pa + pb;
        const double ga = dgates[static_cast<size_t>(n) * 2];
        const double gb = dgates[static_cast<size_t>(n) * 2 + 1];
        dp[a] += pb * (ga - gb) / (s * s);
        dp[b] += pa * (gb - ga) / (s * s);
      }
      double dot = 0;
      for (int e = 0; e < E; ++e) dot += double(p[e]) * dp[e];
      for (int e = 0; e < E; ++e) {
        float& d = dlogits[static_cast<size_t>(n) * E + e];
        d = static_cast<float>(double(d) + double(p[e]) * (dp[e] - dot));
      }
    }
  }

  void moe_assign(int32_t* slot_token, int32_t* assign, int32_t* routed, const int32_t* idx, int N,
                  int E, int k, int capacity) override {
    std::vector<int> used(static_cast<size_t>(E), 0);
    for (size_t r = 0; r < static_cast<size_t>(E) * capacity; ++r) slot_token[r] = -1;
    for (int e = 0; e < E; ++e) routed[e] = 0;
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < k; ++j) {
        const size_t c = static_cast<size_t>(n) * k + j;
        const int e = idx[c];
        ++routed[e];
        if (used[e] < capacity) {
          const int row = e * capacity + used[e]++;
          slot_token[row] = n;
          assign[c] = row;
        } else {
          assign[c] = -1;
        }
      }
    }
  }

  void moe_gather(float* out, const float* inp, const int32_t* slot_token, int rows,
                  int C) override {
    for (int r = 0; r < rows; ++r) {
      float* o = out + static_cast<size_t>(r) * C;
      const int n = slot_token[r];
      for (int c = 0; c < C; ++c) o[c] = n < 0 ? 0.0f : inp[static_cast<size_t>(n) * C + c];
    }
  }

  void moe_gather_backward(float* dinp, const float* dout, const int32_t* assign, int N, int k,
                           int C) override {
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) {
        double acc = dinp[static_cast<size_t>(n) * C + c];
        for (int j = 0; j < k; ++j) {
          const int r = assign[static_cast<size_t>(n) * k + j];
          if (r >= 0) acc += dout[static_cast<size_t>(r) * C + c];
        }
        dinp[static_cast<size_t>(n) * C + c] = static_cast<float>(acc);
      }
    }
  }

  void moe_scatter(float* out, const float* expert_out, const int32_t* assign, const float* gates,
                   int N, int k, int C) override {
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) {
        double acc = 0;
        for (int j = 0; j < k; ++j) {
          const size_t i = static_cast<size_t>(n) * k + j;
          if (assign[i] >= 0)
            acc += double(gates[i]) * expert_out[static_cast<size_t>(assign[i]) * C + c];
        }
        out[static_cast<size_t>(n) * C + c] = static_cast<float>(acc);
      }
    }
  }

  void moe_scatter_backward(float* dexpert_out, float* dgates, const float* dout,
                            const float* expert_out, const int32_t* assign, const float* gates,
                            int N, int k, int C) override {
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * C;
      for (int j = 0; j < k; ++j) {
        const size_t i = static_cast<size_t>(n) * k + j;
        if (assign[i] < 0) continue;
        float* de = dexpert_out + static_cast<size_t>(assign[i]) * C;
        const float* y = expert_out + static_cast<size_t>(assign[i]) * C;
        double dot = 0;
        for (int c = 0; c < C; ++c) {
          de[c] = static_cast<float>(double(de[c]) + double(gates[i]) * d[c]);
          dot += double(d[c]) * y[c];
        }
        dgates[i] = static_cast<float>(double(dgates[i]) + dot);
      }
    }
  }

  void nesterov_update(float* theta, float* momentum, const float* delta, float lr, float mu,
                       size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      const double b = double(mu) * momentum[i] + delta[i];
      momentum[i] = static_cast<float>(b);
      theta[i] = static_cast<float>(theta[i] - double(lr) * (delta[i] + double(mu) * b));
    }
  }
};

}  // namespace

std::unique_ptr<backend> make_reference_backend() { return std::make_unique<reference_backend>(); }

}  // namespace dd::kernels
