// tools/gpu_check/gpt_workload.hpp — a GPT-2-style training step (forward, backward, AdamW)
// written directly against the kernels/backend.hpp ops, for dd-gpu-check: it times the step
// on the CUDA and CPU backends and cross-checks the loss and gradient norm against the
// reference backend. Not the runtime's model (that lives in runtime/); layout follows llm.c
// (tied token embedding / LM head, pre-norm blocks, 4C MLP with GELU).
//
// Used by one thread; each object owns its buffers on one backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "runtime/gpt_config.hpp"

namespace dd::gpu_check {

/// Model and batch shape of the workload: B sequences of T = model.context tokens through a GPT
/// of the runtime's shape (runtime/gpt_config.hpp: width C, layers L, heads NH, vocabulary V;
/// its defaults are the workload's). Requires C % NH == 0.
struct gpt_shape {
  int B = 16;
  gpt_config model;

  /// "B=16 T=128 C=128 L=4 NH=4 V=256".
  std::string str() const;
  /// Tokens per step (B*T).
  int64_t tokens() const { return static_cast<int64_t>(B) * model.context; }
};

/// Parameters, gradients, AdamW moments and activations of one GPT on one backend. The
/// parameters and the token batch are drawn from `seed`, so two workloads with the same shape
/// and seed on different backends start from identical values.
class gpt_workload {
 public:
  /// Allocates and initializes everything on `be` (which must outlive this object). Throws
  /// backend_error when the backend cannot allocate.
  gpt_workload(kernels::backend& be, const gpt_shape& shape, uint64_t seed);
  gpt_workload(const gpt_workload&) = delete;
  gpt_workload& operator=(const gpt_workload&) = delete;

  /// Zeroes the gradients, runs forward and backward. Returns nothing; see mean_loss().
  void forward_backward();
  /// One AdamW step (lr 1e-4, weight decay 0.1) on the current gradients.
  void optimizer_step();
  /// Mean cross-entropy (nats) of the last forward pass. Blocks.
  double mean_loss();
  /// Σ of squared gradient entries over every parameter. Blocks.
  double grad_sum_squares();
  /// Number of parameters.
  size_t num_params() const { return num_params_; }

 private:
  struct layer_params {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb;
  };
  struct model_params {
    float *wte, *wpe, *lnfw, *lnfb;
    std::vector<layer_params> layers;
  };
  struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2_mean,
        *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
  };
  struct model_acts {
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
    std::vector<layer_acts> layers;
  };

  static size_t bind_params(float* base, const gpt_shape& s, model_params& p);
  static size_t bind_acts(float* base, const gpt_shape& s, model_acts& a);

  kernels::backend& be_;
  gpt_shape shape_;
  size_t num_params_ = 0;
  size_t num_acts_ = 0;
  int64_t step_ = 0;
  kernels::buffer<float> params_buf_, grads_buf_, m_buf_, v_buf_, acts_buf_, dacts_buf_,
      scratch_buf_;
  kernels::buffer<int32_t> tokens_buf_, targets_buf_;
  model_params params_{}, grads_{};
  model_acts acts_{}, dacts_{};
};

}  // namespace dd::gpu_check
