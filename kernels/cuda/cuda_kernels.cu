// kernels/cuda/cuda_kernels.cu — this folder's own CUDA kernels and their launchers (see
// cuda_kernels.hpp). Formulas follow the reference backend (kernels/reference/) so results
// match it to rounding; reductions use warp shuffles and fixed-shape block trees, never
// floating-point atomics, so every result is reproducible bit for bit on one device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_kernels.hpp"

namespace dd::kernels::cuda_detail {
namespace {

constexpr int warp_size = 32;
constexpr unsigned full_mask = 0xffffffffu;

/// Grid size for a grid-stride elementwise kernel over n elements with `threads` per block.
unsigned elementwise_blocks(size_t n, int threads) {
  const size_t blocks = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(blocks, size_t{1} << 20)));
}

/// Butterfly sum: every lane ends with the same value (float addition is commutative, so
/// lanes i and i^m compute identical partial sums at every stage).
template <class F>
__device__ F warp_sum(F v) {
  for (int m = warp_size / 2; m > 0; m /= 2) v += __shfl_xor_sync(full_mask, v, m);
  return v;
}

__device__ float warp_max(float v) {
  for (int m = warp_size / 2; m > 0; m /= 2) v = fmaxf(v, __shfl_xor_sync(full_mask, v, m));
  return v;
}

/// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets
/// the result. `shared` holds 32 values. Fixed order for a given blockDim.
template <class F>
__device__ F block_sum(F v, F* shared) {
  const int lane = threadIdx.x % warp_size;
  const int warp = threadIdx.x / warp_size;
  const int warps = blockDim.x / warp_size;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  F total = lane < warps ? shared[lane] : F(0);
  return warp_sum(total);
}

__device__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % warp_size;
  const int warp = threadIdx.x / warp_size;
  const int warps = blockDim.x / warp_size;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(total);
}

// ---- encoder --------------------------------------------------------------------------------

__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                       const float* wpe, size_t total, int T, int C) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T);
    const size_t tok = static_cast<size_t>(tokens[bt]);
    out[i] = wte[tok * C + c] + wpe[static_cast<size_t>(t) * C + c];
  }
}

__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t tc_total = static_cast<size_t>(T) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < tc_total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int b = 0; b < B; ++b) acc += dout[static_cast<size_t>(b) * tc_total + i];
    dwpe[i] = static_cast<float>(dwpe[i] + acc);
  }
}

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout,
                                            const int32_t* bucket_tokens,
                                            const int32_t* bucket_start, const int32_t* positions,
                                            int C) {
  const int bucket = blockIdx.x;
  const size_t tok = static_cast<size_t>(bucket_tokens[bucket]);
  const int begin = bucket_start[bucket];
  const int end = bucket_start[bucket + 1];
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < C; c += gridDim.y * blockDim.x) {
    double acc = 0.0;
    for (int p = begin; p < end; ++p) acc += dout[static_cast<size_t>(positions[p]) * C + c];
    dwte[tok * C + c] = static_cast<float>(dwte[tok * C + c] + acc);
  }
}

// ---- layer norm -----------------------------------------------------------------------------

constexpr int ln_warps_per_block = 8;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
  const int lane = threadIdx.x % warp_size;
  const int row = blockIdx.x * ln_warps_per_block + threadIdx.x / warp_size;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += warp_size) s += x[i];
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int i = lane; i < C; i += warp_size) {
    const float d = x[i] - m;
    v += d * d;
  }
  const float var = warp_sum(v) / C;
  const float r = 1.0f / sqrtf(var + 1e-5f);
  float* o = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += warp_size) o[i] = (r * (x[i] - m)) * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  const int lane = threadIdx.x % warp_size;
  const int row = blockIdx.x * ln_warps_per_block + threadIdx.x / warp_size;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float m = mean[row];
  const float r = rstd[row];
  float a = 0.0f;
  float b = 0.0f;
  for (int i = lane; i < C; i += warp_size) {
    const float norm = (inp[off + i] - m) * r;
    const float dnorm = weight[i] * dout[off + i];
    a += dnorm;
    b += dnorm * norm;
  }
  const float dnorm_mean = warp_sum(a) / C;
  const float dnorm_norm_mean = warp_sum(b) / C;
  for (int i = lane; i < C; i += warp_size) {
    const float norm = (inp[off + i] - m) * r;
    const float dnorm = weight[i] * dout[off + i];
    dinp[off + i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}

// Column reductions: a block of (32 columns) x (32 row lanes); each thread sums rows
// ty, ty+32, ... of its column, then row lane 0 adds the 32 partial sums in order.
constexpr int col_tile = 32;
constexpr int col_rows = 32;

__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int N, int C) {
  __shared__ float sw[col_rows][col_tile + 1];
  __shared__ float sb[col_rows][col_tile + 1];
  const int c = blockIdx.x * col_tile + threadIdx.x;
  float aw = 0.0f;
  float ab = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += col_rows) {
      const size_t off = static_cast<size_t>(n) * C + c;
      const float norm = (inp[off] - mean[n]) * rstd[n];
      aw += dout[off] * norm;
      ab += dout[off];
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f;
    float tb = 0.0f;
    for (int j = 0; j < col_rows; ++j) {
      tw += sw[j][threadIdx.x];
      tb += sb[j][threadIdx.x];
    }
    dweight[c] += tw;
    dbias[c] += tb;
  }
}

__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  __shared__ float sb[col_rows][col_tile + 1];
  const int c = blockIdx.x * col_tile + threadIdx.x;
  float ab = 0.0f;
  if (c < OC) {
    for (int n = threadIdx.y; n < N; n += col_rows) ab += dout[static_cast<size_t>(n) * OC + c];
  }
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < OC) {
    float tb = 0.0f;
    for (int j = 0; j < col_rows; ++j) tb += sb[j][threadIdx.x];
    dbias[c] += tb;
  }
}

__global__ void add_bias_kernel(float* out, const float* bias, size_t total, int OC) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] += bias[i % OC];
  }
}

// ---- attention softmax ----------------------------------------------------------------------

constexpr int sm_warps_per_block = 8;

__global__ void causal_softmax_kernel(float* att, int rows, int T) {
  const int lane = threadIdx.x % warp_size;
  const int row = blockIdx.x * sm_warps_per_block + threadIdx.x / warp_size;
  if (row >= rows) return;
  const int t = row % T;
  float* a = att + static_cast<size_t>(row) * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += warp_size) mx = fmaxf(mx, a[j]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int j = lane; j <= t; j += warp_size) s += expf(a[j] - mx);
  const float inv = 1.0f / warp_sum(s);
  for (int j = lane; j < T; j += warp_size) a[j] = j <= t ? expf(a[j] - mx) * inv : 0.0f;
}

__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int rows, int T,
                                               float scale) {
  const int lane = threadIdx.x % warp_size;
  const int row = blockIdx.x * sm_warps_per_block + threadIdx.x / warp_size;
  if (row >= rows) return;
  const int t = row % T;
  const size_t off = static_cast<size_t>(row) * T;
  float s = 0.0f;
  for (int j = lane; j <= t; j += warp_size) s += att[off + j] * datt[off + j];
  s = warp_sum(s);
  for (int j = lane; j < T; j += warp_size) {
    datt[off + j] = j <= t ? scale * (att[off + j] * (datt[off + j] - s)) : 0.0f;
  }
}

// ---- elementwise ----------------------------------------------------------------------------

constexpr float gelu_scaling = 0.7978845608028654f;  // sqrt(2/pi)

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(gelu_scaling * (x + cube)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    const float arg = gelu_scaling * (x + cube);
    const float th = tanhf(arg);
    const float sech2 = 1.0f - th * th;
    const float grad =
        0.5f * (1.0f + th) + x * 0.5f * sech2 * gelu_scaling * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += grad * dout[i];
  }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, size_t N) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

// ---- softmax cross-entropy ------------------------------------------------------------------

constexpr int ce_threads = 256;

__global__ void softmax_crossentropy_forward_kernel(float* losses, float* probs,
                                                    const float* logits, const int32_t* targets,
                                                    int V) {
  __shared__ float shared[32];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<size_t>(row) * V;
  float* p = probs + static_cast<size_t>(row) * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx, shared);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - mx);
  s = block_sum(s, shared);
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(x[j] - mx) / s;
  if (threadIdx.x == 0) {
    const int tgt = targets[row];
    losses[row] = logf(s) + mx - x[tgt];  // -log softmax, finite even when probs underflow
  }
}

__global__ void softmax_crossentropy_backward_kernel(float* dlogits, const float* probs,
                                                     const int32_t* targets, float dloss,
                                                     size_t total, int V) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / V;
    const int v = static_cast<int>(i % V);
    const float indicator = v == targets[row] ? 1.0f : 0.0f;
    dlogits[i] = dloss * (probs[i] - indicator);
  }
}

// ---- optimizer and syncer math --------------------------------------------------------------

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, double bc1,
                             double bc2) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // Double arithmetic (memory-bound, so free) rounds like the reference backend.
    const double g = grads[i];
    const double mi = double(beta1) * m[i] + (1.0 - double(beta1)) * g;
    const double vi = double(beta2) * v[i] + (1.0 - double(beta2)) * g * g;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    const double mhat = mi / bc1;
    const double vhat = vi / bc2;
    const double theta = params[i];
    params[i] = static_cast<float>(
        theta - double(lr) * (mhat / (sqrt(vhat) + double(eps)) + double(wd) * theta));
  }
}

constexpr int ss_threads = 256;
constexpr int ss_max_blocks = 1024;

__global__ void sum_squares_partial_kernel(double* partials, const float* x, size_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const double d = x[i];
    acc += d * d;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_squares_final_kernel(double* result, const double* partials, int count) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *result = acc;
}

__global__ void all_finite_kernel(int* flag, const float* x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(x[i])) *flag = 0;  // every writer stores the same value
  }
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

__global__ void axpy_kernel(float* y, float a, const float* x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = static_cast<float>(y[i] + double(a) * x[i]);
  }
}

__global__ void nesterov_kernel(float* theta, float* momentum, const float* delta, float lr,
                                float mu, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const double d = delta[i];
    const double b = double(mu) * momentum[i] + d;
    momentum[i] = static_cast<float>(b);
    theta[i] = static_cast<float>(theta[i] - double(lr) * (d + double(mu) * b));
  }
}

struct weighted_sum_args {
  const float* inputs[weighted_sum_max_inputs];
  float weights[weighted_sum_max_inputs];
  int k;
};

__global__ void weighted_sum_kernel(float* out, weighted_sum_args args, size_t n, bool accumulate) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    double acc = accumulate ? double(out[i]) : 0.0;
    for (int j = 0; j < args.k; ++j) acc += double(args.weights[j]) * args.inputs[j][i];
    out[i] = static_cast<float>(acc);
  }
}

constexpr int ew_threads = 256;

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

void launch_encoder_forward(cudaStream_t stream, const char* op, float* out, const int32_t* tokens,
                            const float* wte, const float* wpe, int B, int T, int C) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return;
  encoder_forward_kernel<<<elementwise_blocks(total, ew_threads), ew_threads, 0, stream>>>(
      out, tokens, wte, wpe, total, T, C);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_encoder_backward_wpe(cudaStream_t stream, const char* op, float* dwpe,
                                 const float* dout, int B, int T, int C) {
  const size_t total = static_cast<size_t>(T) * C;
  if (total == 0) return;
  encoder_backward_wpe_kernel<<<elementwise_blocks(total, ew_threads), ew_threads, 0, stream>>>(
      dwpe, dout, B, T, C);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_encoder_backward_wte(cudaStream_t stream, const char* op, float* dwte,
                                 const float* dout, const int32_t* bucket_tokens,
                                 const int32_t* bucket_start, const int32_t* positions,
                                 int num_buckets, int C) {
  if (num_buckets == 0 || C == 0) return;
  const int threads = std::min(256, ((C + warp_size - 1) / warp_size) * warp_size);
  const unsigned ychunks = static_cast<unsigned>((C + threads - 1) / threads);
  encoder_backward_wte_kernel<<<dim3(static_cast<unsigned>(num_buckets), ychunks), threads, 0,
                                stream>>>(dwte, dout, bucket_tokens, bucket_start, positions, C);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_layernorm_forward(cudaStream_t stream, const char* op, float* out, float* mean,
                              float* rstd, const float* inp, const float* weight, const float* bias,
                              int N, int C) {
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + ln_warps_per_block - 1) / ln_warps_per_block);
  layernorm_forward_kernel<<<blocks, ln_warps_per_block * warp_size, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, N, C);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_layernorm_backward_dinp(cudaStream_t stream, const char* op, float* dinp,
                                    const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, int N, int C) {
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((N + ln_warps_per_block - 1) / ln_warps_per_block);
  layernorm_backward_dinp_kernel<<<blocks, ln_warps_per_block * warp_size, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_layernorm_backward_params(cudaStream_t stream, const char* op, float* dweight,
                                      float* dbias, const float* dout, const float* inp,
                                      const float* mean, const float* rstd, int N, int C) {
  if (C == 0) return;
  const unsigned blocks = static_cast<unsigned>((C + col_tile - 1) / col_tile);
  layernorm_backward_params_kernel<<<blocks, dim3(col_tile, col_rows), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_add_bias(cudaStream_t stream, const char* op, float* out, const float* bias, int N,
                     int OC) {
  const size_t total = static_cast<size_t>(N) * OC;
  if (total == 0) return;
  add_bias_kernel<<<elementwise_blocks(total, ew_threads), ew_threads, 0, stream>>>(out, bias,
                                                                                    total, OC);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_bias_backward(cudaStream_t stream, const char* op, float* dbias, const float* dout,
                          int N, int OC) {
  if (OC == 0) return;
  const unsigned blocks = static_cast<unsigned>((OC + col_tile - 1) / col_tile);
  bias_backward_kernel<<<blocks, dim3(col_tile, col_rows), 0, stream>>>(dbias, dout, N, OC);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_causal_softmax(cudaStream_t stream, const char* op, float* att, int rows, int T) {
  if (rows == 0) return;
  const unsigned blocks =
      static_cast<unsigned>((rows + sm_warps_per_block - 1) / sm_warps_per_block);
  causal_softmax_kernel<<<blocks, sm_warps_per_block * warp_size, 0, stream>>>(att, rows, T);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_causal_softmax_backward(cudaStream_t stream, const char* op, float* datt,
                                    const float* att, int rows, int T, float scale) {
  if (rows == 0) return;
  const unsigned blocks =
      static_cast<unsigned>((rows + sm_warps_per_block - 1) / sm_warps_per_block);
  causal_softmax_backward_kernel<<<blocks, sm_warps_per_block * warp_size, 0, stream>>>(
      datt, att, rows, T, scale);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_gelu_forward(cudaStream_t stream, const char* op, float* out, const float* inp,
                         size_t N) {
  if (N == 0) return;
  gelu_forward_kernel<<<elementwise_blocks(N, ew_threads), ew_threads, 0, stream>>>(out, inp, N);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_gelu_backward(cudaStream_t stream, const char* op, float* dinp, const float* inp,
                          const float* dout, size_t N) {
  if (N == 0) return;
  gelu_backward_kernel<<<elementwise_blocks(N, ew_threads), ew_threads, 0, stream>>>(dinp, inp,
                                                                                     dout, N);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_residual_forward(cudaStream_t stream, const char* op, float* out, const float* a,
                             const float* b, size_t N) {
  if (N == 0) return;
  residual_forward_kernel<<<elementwise_blocks(N, ew_threads), ew_threads, 0, stream>>>(out, a, b,
                                                                                        N);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_softmax_crossentropy_forward(cudaStream_t stream, const char* op, float* losses,
                                         float* probs, const float* logits, const int32_t* targets,
                                         int N, int V) {
  if (N == 0) return;
  softmax_crossentropy_forward_kernel<<<static_cast<unsigned>(N), ce_threads, 0, stream>>>(
      losses, probs, logits, targets, V);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_softmax_crossentropy_backward(cudaStream_t stream, const char* op, float* dlogits,
                                          const float* probs, const int32_t* targets, float dloss,
                                          int N, int V) {
  const size_t total = static_cast<size_t>(N) * V;
  if (total == 0) return;
  softmax_crossentropy_backward_kernel<<<elementwise_blocks(total, ew_threads), ew_threads, 0,
                                         stream>>>(dlogits, probs, targets, dloss, total, V);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_adamw(cudaStream_t stream, const char* op, float* params, const float* grads, float* m,
                  float* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, double bc1, double bc2) {
  if (n == 0) return;
  adamw_kernel<<<elementwise_blocks(n, ew_threads), ew_threads, 0, stream>>>(
      params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
  DD_CUDA_CHECK_LAUNCH(op);
}

size_t sum_squares_scratch_doubles() { return 1 + ss_max_blocks; }

void launch_sum_squares(cudaStream_t stream, const char* op, double* scratch, const float* x,
                        size_t n) {
  const unsigned blocks = std::min<unsigned>(elementwise_blocks(n, ss_threads), ss_max_blocks);
  sum_squares_partial_kernel<<<blocks, ss_threads, 0, stream>>>(scratch + 1, x, n);
  DD_CUDA_CHECK_LAUNCH(op);
  sum_squares_final_kernel<<<1, ss_max_blocks, 0, stream>>>(scratch, scratch + 1,
                                                            static_cast<int>(blocks));
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_all_finite(cudaStream_t stream, const char* op, int* flag, const float* x, size_t n) {
  if (n == 0) return;
  all_finite_kernel<<<elementwise_blocks(n, ew_threads), ew_threads, 0, stream>>>(flag, x, n);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_scale(cudaStream_t stream, const char* op, float* x, float s, size_t n) {
  if (n == 0) return;
  scale_kernel<<<elementwise_blocks(n, ew_threads), ew_threads, 0, stream>>>(x, s, n);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_axpy(cudaStream_t stream, const char* op, float* y, float a, const float* x, size_t n) {
  if (n == 0) return;
  axpy_kernel<<<elementwise_blocks(n, ew_threads), ew_threads, 0, stream>>>(y, a, x, n);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_nesterov(cudaStream_t stream, const char* op, float* theta, float* momentum,
                     const float* delta, float lr, float mu, size_t n) {
  if (n == 0) return;
  nesterov_kernel<<<elementwise_blocks(n, ew_threads), ew_threads, 0, stream>>>(theta, momentum,
                                                                                delta, lr, mu, n);
  DD_CUDA_CHECK_LAUNCH(op);
}

void launch_weighted_sum(cudaStream_t stream, const char* op, float* out,
                         const float* const* inputs, const float* weights, int k, size_t n,
                         bool accumulate) {
  if (n == 0) return;
  weighted_sum_args args{};
  args.k = std::min(k, weighted_sum_max_inputs);
  for (int j = 0; j < args.k; ++j) {
    args.inputs[j] = inputs[j];
    args.weights[j] = weights[j];
  }
  weighted_sum_kernel<<<elementwise_blocks(n, ew_threads), ew_threads, 0, stream>>>(out, args, n,
                                                                                    accumulate);
  DD_CUDA_CHECK_LAUNCH(op);
}

}  // namespace dd::kernels::cuda_detail
