// kernels/backend.hpp — the one interface every compute backend implements.
//
// A backend owns a memory space (host memory for `reference` and `cpu`, device memory for
// `cuda`) and runs the math a decoder-only transformer, its training and the syncer need.
// All pointers passed to an op live in that backend's memory space; move data across with
// `upload`/`download`. Buffers are RAII (`buffer<T>`), move-only, owned by one object.
//
// Threading: a backend object is used by one thread at a time (one learner actor, or one
// fragment owner). Several backend objects may run concurrently.
//
// Layout conventions (llm.c's): activations are row-major (B, T, C); a linear layer's weight is
// (OC, IC) row-major and computes out = inp · Wᵀ + bias. Ops named *_backward ACCUMULATE into
// their gradient outputs (+=) unless the doc comment says "writes"; callers zero gradients once
// per step. Sizes are element counts unless stated otherwise.
//
// Errors: shape arguments are trusted (the model checks them); a device fault throws
// dd::kernels::backend_error naming the op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace dd::kernels {

/// Thrown when a backend cannot run an op (device error, allocation failure). The message
/// names the op and the underlying error.
class backend_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class backend;

/// A typed, move-only allocation in one backend's memory space.
template <class T>
class buffer {
 public:
  buffer() = default;
  buffer(backend* owner, T* ptr, size_t size) : owner_(owner), ptr_(ptr), size_(size) {}
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& other) noexcept { swap(other); }
  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      reset();
      swap(other);
    }
    return *this;
  }
  ~buffer() { reset(); }

  /// Pointer in the owning backend's memory space (device pointer for CUDA).
  T* data() const noexcept { return ptr_; }
  /// Number of elements of type T.
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  backend* owner() const noexcept { return owner_; }
  void reset() noexcept;

 private:
  void swap(buffer& other) noexcept {
    std::swap(owner_, other.owner_);
    std::swap(ptr_, other.ptr_);
    std::swap(size_, other.size_);
  }
  backend* owner_ = nullptr;
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

/// Hyperparameters of one AdamW step (Loshchilov & Hutter 2019, Algorithm 2: decoupled weight
/// decay). `step` is the 1-based step count t used for bias correction.
struct adamw_params {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;
};

/// A run [offset, offset + n) of a flat parameter buffer and the weight decay AdamW applies to it.
struct adamw_segment {
  size_t offset = 0;
  size_t n = 0;
  float weight_decay = 0.0f;
};

/// The backend interface. See the file comment for layout and accumulation conventions.
class backend {
 public:
  virtual ~backend() = default;

  /// "reference", "cpu" or "cuda".
  virtual std::string name() const = 0;

  // ---- memory ----------------------------------------------------------------------------
  /// Allocates `n` bytes in this backend's memory space, zero-filled. Throws backend_error.
  virtual void* allocate_bytes(size_t n) = 0;
  virtual void free_bytes(void* p) noexcept = 0;
  /// Copies `n` bytes host → backend memory.
  virtual void upload_bytes(void* dst, const void* src_host, size_t n) = 0;
  /// Copies `n` bytes backend memory → host. Completes before returning.
  virtual void download_bytes(void* dst_host, const void* src, size_t n) = 0;
  /// Copies `n` bytes within this backend's memory space.
  virtual void copy_bytes(void* dst, const void* src, size_t n) = 0;
  /// Sets `n` bytes to zero.
  virtual void zero_bytes(void* dst, size_t n) = 0;
  /// Waits until every queued op has completed (no-op on host backends).
  virtual void synchronize() {}

  template <class T>
  buffer<T> alloc(size_t n) {
    return buffer<T>(this, static_cast<T*>(allocate_bytes(n * sizeof(T) + (n == 0))), n);
  }
  template <class T>
  void upload(T* dst, const T* src_host, size_t n) {
    upload_bytes(dst, src_host, n * sizeof(T));
  }
  template <class T>
  void download(T* dst_host, const T* src, size_t n) {
    download_bytes(dst_host, src, n * sizeof(T));
  }
  template <class T>
  void copy(T* dst, const T* src, size_t n) {
    copy_bytes(dst, src, n * sizeof(T));
  }
  template <class T>
  void zero(T* dst, size_t n) {
    zero_bytes(dst, n * sizeof(T));
  }

  // ---- transformer forward / backward ------------------------------------------------------
  /// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].  out (B,T,C), tokens (B,T) in [0,V),
  /// wte (V,C), wpe (maxT,C) with T <= maxT.
  virtual void encoder_forward(float* out, const int32_t* tokens, const float* wte,
                               const float* wpe, int B, int T, int C) = 0;
  /// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:].  Accumulates.
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                int B, int T, int C) = 0;

  /// Layer norm over the last axis (Ba et al. 2016), eps = 1e-5.
  /// out (N,C) = (inp - mean) * rstd * weight + bias; writes mean (N) and rstd (N) for backward.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C) = 0;
  /// res (N,C) = a + b, then layernorm_forward of res into out, mean, rstd: the bits of
  /// residual_forward then layernorm_forward (the default calls them). `cpu` does both in one
  /// pass over the rows, each row's sum normalized while it is in cache. res may alias a or b.
  virtual void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd,
                                          const float* a, const float* b, const float* weight,
                                          const float* bias, int N, int C) {
    residual_forward(res, a, b, static_cast<size_t>(N) * C);
    layernorm_forward(out, mean, rstd, res, weight, bias, N, C);
  }
  /// Accumulates dinp (N,C), dweight (C), dbias (C).
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;

  /// out (N,OC) = inp (N,IC) · weight(OC,IC)ᵀ + bias (OC); bias may be null. Writes out.
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int IC, int OC) = 0;
  /// dinp (N,IC) += dout · weight; dweight (OC,IC) += doutᵀ · inp; dbias (OC) += Σ_n dout
  /// (dbias may be null). Accumulates.
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int IC, int OC) = 0;
  /// As matmul_backward, but WRITES dinp (N,IC) = dout · weight (its old contents are ignored);
  /// dweight and dbias still accumulate. The same values as zeroing dinp and calling
  /// matmul_backward, without the caller's zeroing pass. The default does exactly that; a
  /// backend overrides it to write dinp directly.
  virtual void matmul_backward_writes_dinp(float* dinp, float* dweight, float* dbias,
                                           const float* dout, const float* inp, const float* weight,
                                           int N, int IC, int OC) {
    zero(dinp, static_cast<size_t>(N) * IC);
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }

  /// Causal multi-head self-attention (Vaswani et al. 2017, eq. 1) with scale 1/sqrt(hs),
  /// hs = C/NH. qkv (B,T,3C) holds [q | k | v] per position, each split into NH heads of hs.
  /// Writes out (B,T,C) and att (B,NH,T,T) = the post-softmax probabilities (zeros above the
  /// diagonal), which backward needs.
  virtual void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  /// Accumulates dqkv (B,T,3C). `scratch` holds at least B*NH*T*T floats of workspace.
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* att, int B, int T, int C, int NH) = 0;

  // ---- vision transformer ops ----------------------------------------------------------------
  // Implemented by `reference` and `cpu`. The base versions throw backend_error naming the
  // backend and the op (the CUDA backend has none of them yet).

  /// Bidirectional (unmasked) multi-head self-attention, the ViT encoder's (Dosovitskiy et al.
  /// 2021, eq. 2; Vaswani et al. 2017, eq. 1): as attention_forward, but every position attends
  /// to all T positions. Writes out (B,T,C) and att (B,NH,T,T) (full rows of probabilities).
  virtual void attention_forward_bidirectional(float* /*out*/, float* /*att*/, const float* /*qkv*/,
                                               int /*B*/, int /*T*/, int /*C*/, int /*NH*/) {
    missing_op("attention_forward_bidirectional");
  }
  /// Accumulates dqkv (B,T,3C). `scratch` holds at least B*NH*T*T floats of workspace.
  virtual void attention_backward_bidirectional(float* /*dqkv*/, float* /*scratch*/,
                                                const float* /*dout*/, const float* /*qkv*/,
                                                const float* /*att*/, int /*B*/, int /*T*/,
                                                int /*C*/, int /*NH*/) {
    missing_op("attention_backward_bidirectional");
  }

  /// ViT token assembly with T = ncls + P tokens per image, ncls ∈ {0, 1}:
  /// out[b,t,:] = (t < ncls ? cls[t,:] : patches[b,t-ncls,:]) + pos[t,:]. Writes out (B,T,C);
  /// patches (B,P,C) (the patch projections), cls (ncls,C) (unused when ncls = 0), pos (T,C).
  virtual void vit_embed_forward(float* /*out*/, const float* /*patches*/, const float* /*cls*/,
                                 const float* /*pos*/, int /*B*/, int /*P*/, int /*C*/,
                                 int /*ncls*/) {
    missing_op("vit_embed_forward");
  }
  /// Accumulates dpatches (B,P,C), dcls (ncls,C) (Σ over b), dpos (T,C) (Σ over b) from dout
  /// (B,T,C).
  virtual void vit_embed_backward(float* /*dpatches*/, float* /*dcls*/, float* /*dpos*/,
                                  const float* /*dout*/, int /*B*/, int /*P*/, int /*C*/,
                                  int /*ncls*/) {
    missing_op("vit_embed_backward");
  }

  /// Token pooling: out[b,:] = mean over t ∈ [t0, t1) of inp[b,t,:], 0 <= t0 < t1 <= T.
  /// Writes out (B,C). ("cls" pooling is [0, 1); "mean" pooling is [0, T).)
  virtual void token_mean_forward(float* /*out*/, const float* /*inp*/, int /*B*/, int /*T*/,
                                  int /*C*/, int /*t0*/, int /*t1*/) {
    missing_op("token_mean_forward");
  }
  /// dinp[b,t,:] += dout[b,:] / (t1 - t0) for t ∈ [t0, t1). Accumulates dinp (B,T,C).
  virtual void token_mean_backward(float* /*dinp*/, const float* /*dout*/, int /*B*/, int /*T*/,
                                   int /*C*/, int /*t0*/, int /*t1*/) {
    missing_op("token_mean_backward");
  }

  /// GELU, tanh approximation (Hendrycks & Gimpel 2016): writes out (N).
  virtual void gelu_forward(float* out, const float* inp, size_t N) = 0;
  /// dinp (N) += dout * gelu'(inp). Accumulates.
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) = 0;
  /// WRITES dinp (N) = dout * gelu'(inp): gelu_backward into a zeroed dinp, without the
  /// zeroing pass. The default zeroes dinp and calls gelu_backward.
  virtual void gelu_backward_writes(float* dinp, const float* inp, const float* dout, size_t N) {
    zero(dinp, N);
    gelu_backward(dinp, inp, dout, N);
  }

  /// out = a + b, (N). Writes. (out may alias a or b.)
  virtual void residual_forward(float* out, const float* a, const float* b, size_t N) = 0;

  /// Softmax cross-entropy over V classes for N rows. Writes probs (N,V) and losses (N) in nats:
  /// losses[n] = -log softmax(logits[n])[targets[n]].
  virtual void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                            const int32_t* targets, int N, int V) = 0;
  /// WRITES dlogits (N,V) = dloss * (probs - onehot(targets)), e.g. dloss = 1/N for a mean loss.
  virtual void softmax_crossentropy_backward(float* dlogits, const float* probs,
                                             const int32_t* targets, float dloss, int N, int V) = 0;

  // ---- mixture of experts (runtime/moe_gpt.hpp) ---------------------------------------------
  // Implemented by the reference and cpu backends; the defaults (inline, so that a backend
  // module needs no symbol from dd_kernels) throw backend_error naming the op and the backend
  // (CUDA has none yet: the config refuses moe_gpt with backend "cuda").
  // Layout: N tokens, E experts, k choices per token (1 or 2), `capacity` slots per expert; the
  // expert buffers hold E·capacity rows, expert e's rows are [e·capacity, (e+1)·capacity).

  /// Router (Shazeer et al. 2017; Switch, Fedus et al. 2021; GShard, Lepikhin et al. 2020):
  /// WRITES probs (N,E) = softmax(logits (N,E)) per row; idx (N,k) = the k most probable
  /// experts in descending probability, ties to the lower expert index; gates (N,k): for k = 1
  /// gates = probs[idx] (Switch), for k = 2 the two probabilities divided by their sum.
  /// Requires 1 <= k <= min(2, E).
  virtual void router_forward(float* /*probs*/, int32_t* /*idx*/, float* /*gates*/,
                              const float* /*logits*/, int /*N*/, int /*E*/, int /*k*/) {
    unsupported_op("router_forward");
  }
  /// Accumulates dlogits (N,E) += softmax-backward of dp, where dp (N,E) = dprobs (may be null:
  /// 0) plus the gradient of the gates through router_forward's selection and renormalisation
  /// given dgates (N,k) (k = 1: dp[idx] += dg; k = 2, s = p_a + p_b: dp_a += p_b (dg_a − dg_b)/s²,
  /// dp_b += p_a (dg_b − dg_a)/s²). probs/idx as router_forward wrote them.
  virtual void router_backward(float* /*dlogits*/, const float* /*dgates*/, const float* /*dprobs*/,
                               const float* /*probs*/, const int32_t* /*idx*/, int /*N*/, int /*E*/,
                               int /*k*/) {
    unsupported_op("router_backward");
  }
  /// Capacity assignment in batch order: tokens n = 0..N-1, each token's choices j = 0..k-1 in
  /// rank order; choice (n, j) to expert e = idx[n,j] takes expert e's next free slot s while
  /// s < capacity, else it is dropped. WRITES slot_token (E·capacity) = the token in each slot or
  /// −1 (free), assign (N,k) = the row e·capacity + s of each choice or −1 (dropped), routed (E)
  /// = choices that picked e, kept or dropped.
  virtual void moe_assign(int32_t* /*slot_token*/, int32_t* /*assign*/, int32_t* /*routed*/,
                          const int32_t* /*idx*/, int /*N*/, int /*E*/, int /*k*/,
                          int /*capacity*/) {
    unsupported_op("moe_assign");
  }
  /// WRITES out (rows, C): row r = inp (·,C) row slot_token[r], or zeros when slot_token[r] < 0.
  virtual void moe_gather(float* /*out*/, const float* /*inp*/, const int32_t* /*slot_token*/,
                          int /*rows*/, int /*C*/) {
    unsupported_op("moe_gather");
  }
  /// Accumulates dinp (N,C) row n += Σ_j dout row assign[n,j] over the j with assign[n,j] >= 0
  /// (the adjoint of moe_gather, indexed by the inverse map moe_assign wrote).
  virtual void moe_gather_backward(float* /*dinp*/, const float* /*dout*/,
                                   const int32_t* /*assign*/, int /*N*/, int /*k*/, int /*C*/) {
    unsupported_op("moe_gather_backward");
  }
  /// WRITES out (N,C) row n = Σ_j gates[n,j] · expert_out row assign[n,j] over j with
  /// assign[n,j] >= 0 (a fully dropped token gets zeros).
  virtual void moe_scatter(float* /*out*/, const float* /*expert_out*/, const int32_t* /*assign*/,
                           const float* /*gates*/, int /*N*/, int /*k*/, int /*C*/) {
    unsupported_op("moe_scatter");
  }
  /// Accumulates dexpert_out row assign[n,j] += gates[n,j] · dout row n and dgates[n,j] +=
  /// dout row n · expert_out row assign[n,j] (dot product) for assign[n,j] >= 0.
  virtual void moe_scatter_backward(float* /*dexpert_out*/, float* /*dgates*/,
                                    const float* /*dout*/, const float* /*expert_out*/,
                                    const int32_t* /*assign*/, const float* /*gates*/, int /*N*/,
                                    int /*k*/, int /*C*/) {
    unsupported_op("moe_scatter_backward");
  }

  // ---- optimizer ----------------------------------------------------------------------------
  /// One AdamW step over n parameters: m = β1 m + (1-β1) g; v = β2 v + (1-β2) g²;
  /// m̂ = m/(1-β1^t); v̂ = v/(1-β2^t); θ -= lr (m̂/(sqrt(v̂)+eps) + wd θ).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                            const adamw_params& p) = 0;
  /// adamw_update over each of `count` segments of the flat buffers (offsets into params, grads,
  /// m and v; p.weight_decay replaced by the segment's), every gradient taken as
  /// float(grad_scale · g): the result of scale(grads, grad_scale) then adamw_update per segment,
  /// bit for bit. Leaves grads either scaled or unchanged. The default does exactly that (scale
  /// when grad_scale != 1, then one adamw_update per segment); `cpu` runs it as one pass over
  /// all segments and leaves grads unchanged.
  virtual void adamw_update_segments(float* params, float* grads, float* m, float* v,
                                     const adamw_segment* segments, size_t count, float grad_scale,
                                     const adamw_params& p) {
    adamw_params q = p;
    for (size_t k = 0; k < count; ++k) {
      const adamw_segment& s = segments[k];
      if (grad_scale != 1.0f) scale(grads + s.offset, grad_scale, s.n);
      q.weight_decay = s.weight_decay;
      adamw_update(params + s.offset, grads + s.offset, m + s.offset, v + s.offset, s.n, q);
    }
  }
  /// Σ x², accumulated in double on host backends. Blocks until the result is known.
  virtual double sum_squares(const float* x, size_t n) = 0;
  /// x *= s, (n).
  virtual void scale(float* x, float s, size_t n) = 0;
  /// True when every element of x (n) is finite. Blocks.
  virtual bool all_finite(const float* x, size_t n) = 0;

  // ---- syncer math ------------------------------------------------------------------------
  /// out (n) = Σ_k weights[k] * inputs[k] (n). `inputs` is a host array of k pointers into this
  /// backend's memory; `weights` is a host array of k floats. Writes out (may not alias inputs).
  virtual void weighted_sum(float* out, const float* const* inputs, const float* weights, int k,
                            size_t n) = 0;
  /// y += a * x, (n).
  virtual void axpy(float* y, float a, const float* x, size_t n) = 0;
  /// Nesterov outer step (Sutskever et al. 2013; DiLoCo, arXiv 2311.08105, Alg. 1):
  /// b = mu * b + delta; theta -= lr * (delta + mu * b). All (n).
  virtual void nesterov_update(float* theta, float* momentum, const float* delta, float lr,
                               float mu, size_t n) = 0;

 protected:
  /// Throws backend_error naming this backend and `op`: the base version of an op that only
  /// some backends have. (Defined in the class, like the ops above, so that backend keeps no
  /// out-of-line virtual function: its vtable and typeinfo are emitted wherever it is used,
  /// which the CUDA module, linked without backend.cpp, relies on.)
  [[noreturn]] void missing_op(const char* op) const {
    throw backend_error("backend \"" + name() + "\" has no " + op +
                        " op yet (the vision transformer runs on \"reference\" and \"cpu\")");
  }
  /// Throws backend_error "<op>: not implemented on the <name> backend ...".
  [[noreturn]] void unsupported_op(const char* op) const {
    throw backend_error(std::string(op) + ": not implemented on the " + name() +
                        " backend (mixture-of-experts ops exist on reference and cpu)");
  }
};

template <class T>
void buffer<T>::reset() noexcept {
  if (owner_ != nullptr && ptr_ != nullptr) owner_->free_bytes(ptr_);
  owner_ = nullptr;
  ptr_ = nullptr;
  size_ = 0;
}

/// Options for creating a backend.
struct backend_options {
  /// CPU threads for this backend's loops and BLAS calls; 0 = one per hardware thread.
  int threads = 0;
  /// CUDA device ordinal.
  int device = 0;
};

/// Creates a backend by name: "reference", "cpu" or "cuda". Throws backend_error for an unknown
/// name, or "cuda" when the build has no CUDA backend, its module cannot be loaded or no device
/// is present (the message says which). "cuda" is known only after
/// dd::kernels::init_all_backends() (kernels/all_backends.hpp, library dd_kernels_all)
/// registered it; the first "cuda" request loads the module (kernels/cuda_loader.hpp).
std::unique_ptr<backend> make_backend(const std::string& name, const backend_options& opts = {});

/// True when the CUDA backend is registered (init_all_backends()), its module loads and at least
/// one device is usable. The first call may load the module (cuBLAS). Never throws.
bool cuda_available();

}  // namespace dd::kernels
