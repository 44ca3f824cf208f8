// kernels/cuda/cuda_kernels.hpp — host-side launchers of this folder's own CUDA kernels
// (internal to kernels/cuda/; called only by cuda_backend.cu).
//
// Every launcher queues its kernel(s) on `stream` and checks the launch, throwing
// backend_error naming `op`. Pointers are device pointers; shapes follow kernels/backend.hpp.
// None of these kernels uses floating-point atomics: every reduction has a fixed order that
// depends only on the shapes, so results are bit-reproducible run to run on one device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dd::kernels::cuda_detail {

/// out (B,T,C) = wte[tokens] + wpe[t].
void launch_encoder_forward(cudaStream_t stream, const char* op, float* out, const int32_t* tokens,
                            const float* wte, const float* wpe, int B, int T, int C);
/// dwpe (T,C) += Σ_b dout[b,t,:], summed in double in ascending b, added once (as the reference).
void launch_encoder_backward_wpe(cudaStream_t stream, const char* op, float* dwpe,
                                 const float* dout, int B, int T, int C);
/// dwte[token,:] += Σ dout[pos,:] over the positions of each distinct token, summed in double
/// in ascending position order and added once (the reference backend's order). `bucket_tokens`
/// (num_buckets) lists the distinct tokens; positions of bucket i are `positions[bucket_start[i] ..
/// bucket_start[i+1])` (flat indices b*T+t).
void launch_encoder_backward_wte(cudaStream_t stream, const char* op, float* dwte,
                                 const float* dout, const int32_t* bucket_tokens,
                                 const int32_t* bucket_start, const int32_t* positions,
                                 int num_buckets, int C);

/// Layer norm forward, one warp per row; writes out (N,C), mean (N), rstd (N). eps = 1e-5.
void launch_layernorm_forward(cudaStream_t stream, const char* op, float* out, float* mean,
                              float* rstd, const float* inp, const float* weight, const float* bias,
                              int N, int C);
/// dinp (N,C) += ..., one warp per row.
void launch_layernorm_backward_dinp(cudaStream_t stream, const char* op, float* dinp,
                                    const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, int N, int C);
/// dweight (C) += Σ_n dout·norm; dbias (C) += Σ_n dout (column reductions, fixed order).
void launch_layernorm_backward_params(cudaStream_t stream, const char* op, float* dweight,
                                      float* dbias, const float* dout, const float* inp,
                                      const float* mean, const float* rstd, int N, int C);

/// out (N,OC) += bias (OC) broadcast over rows.
void launch_add_bias(cudaStream_t stream, const char* op, float* out, const float* bias, int N,
                     int OC);
/// dbias (OC) += Σ_n dout (N,OC) (column reduction, fixed order).
void launch_bias_backward(cudaStream_t stream, const char* op, float* dbias, const float* dout,
                          int N, int OC);

/// In place over att (rows, T) of `rows = B*NH*T` rows: row r (query position t = r mod T)
/// becomes softmax of its first t+1 entries; entries above the diagonal become 0.
void launch_causal_softmax(cudaStream_t stream, const char* op, float* att, int rows, int T);
/// In place: datt (rows, T) becomes dpreatt = scale · att ⊙ (datt − Σ_j att·datt), masked
/// to the causal part (zeros above the diagonal).
void launch_causal_softmax_backward(cudaStream_t stream, const char* op, float* datt,
                                    const float* att, int rows, int T, float scale);

/// out (N) = gelu(inp), tanh approximation.
void launch_gelu_forward(cudaStream_t stream, const char* op, float* out, const float* inp,
                         size_t N);
/// dinp (N) += dout · gelu'(inp).
void launch_gelu_backward(cudaStream_t stream, const char* op, float* dinp, const float* inp,
                          const float* dout, size_t N);
/// out (N) = a + b.
void launch_residual_forward(cudaStream_t stream, const char* op, float* out, const float* a,
                             const float* b, size_t N);

/// probs (N,V) = softmax(logits); losses (N) = -log probs[targets]. One block per row.
void launch_softmax_crossentropy_forward(cudaStream_t stream, const char* op, float* losses,
                                         float* probs, const float* logits, const int32_t* targets,
                                         int N, int V);
/// dlogits (N,V) = dloss · (probs − onehot(targets)). Writes.
void launch_softmax_crossentropy_backward(cudaStream_t stream, const char* op, float* dlogits,
                                          const float* probs, const int32_t* targets, float dloss,
                                          int N, int V);

/// AdamW over n parameters; `bc1`, `bc2` are the bias corrections 1−β1^t, 1−β2^t.
void launch_adamw(cudaStream_t stream, const char* op, float* params, const float* grads, float* m,
                  float* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, double bc1, double bc2);
/// Number of doubles of scratch launch_sum_squares needs (partials + result).
size_t sum_squares_scratch_doubles();
/// scratch[0] = Σ x² in double (two-stage fixed-order reduction). `scratch` holds
/// sum_squares_scratch_doubles() doubles.
void launch_sum_squares(cudaStream_t stream, const char* op, double* scratch, const float* x,
                        size_t n);
/// *flag = 0 when some x is not finite (the caller sets *flag = 1 first).
void launch_all_finite(cudaStream_t stream, const char* op, int* flag, const float* x, size_t n);
/// x (n) *= s.
void launch_scale(cudaStream_t stream, const char* op, float* x, float s, size_t n);
/// y (n) += a · x.
void launch_axpy(cudaStream_t stream, const char* op, float* y, float a, const float* x, size_t n);
/// b = mu·b + delta; theta −= lr·(delta + mu·b). All (n).
void launch_nesterov(cudaStream_t stream, const char* op, float* theta, float* momentum,
                     const float* delta, float lr, float mu, size_t n);

/// Most inputs one launch_weighted_sum call takes (they travel as kernel arguments).
inline constexpr int weighted_sum_max_inputs = 16;
/// out (n) = (accumulate ? out : 0) + Σ_{j<k} weights[j] · inputs[j], j in ascending order;
/// k <= weighted_sum_max_inputs. `inputs` and `weights` are host arrays.
void launch_weighted_sum(cudaStream_t stream, const char* op, float* out,
                         const float* const* inputs, const float* weights, int k, size_t n,
                         bool accumulate);

}  // namespace dd::kernels::cuda_detail
