// runtime/fragments.hpp — split a model's tensors into P fragments (the units Decoupled DiLoCo
// synchronizes; ALGORITHM.md "Vocabulary" and "Defaults": balanced tensor fragmentation, also
// `layer` and `strided`), and copy a fragment between a flat parameter vector and its own
// contiguous fragment vector.
//
// A fragment vector is the concatenation of its tensors in ascending tensor-index order; the
// `fragment_tensor` entries give each tensor's range in it. The plan is a pure function of the
// tensor list, P and the strategy (deterministic: every learner and owner computes the same plan).
// Who calls it: learners (push/apply), fragment owners (merge layout), the evaluator. Plans are
// values; any thread. The backend overloads follow the backend's threading rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"
#include "messages/error.hpp"
#include "runtime/tensor_info.hpp"

namespace dd {

/// How tensors are assigned to fragments.
enum class fragment_strategy : uint8_t {
  /// Greedy bin packing of whole tensors: largest numel first (ties: lower tensor index first),
  /// each onto the fragment with the fewest elements so far (ties: lower fragment index).
  /// Max/min load is close to 1 when tensors are small against numel/P.
  balanced,
  /// By transformer block: the blocks 0..L-1 are cut into P contiguous ranges whose sizes differ
  /// by at most one block (the first L mod P ranges get one more); tensors with layer < 0 go by
  /// name: embeddings and anything before the first block (e.g. "wte", "wpe") join fragment 0,
  /// everything after (e.g. "ln_f.*") joins fragment P-1. More precisely, a non-block tensor goes
  /// to fragment 0 when its tensor index is below the first block tensor's index, else to P-1.
  /// Requires P <= L (number of distinct blocks) when L > 0.
  layer,
  /// Tensor i → fragment i mod P.
  strided,
};

/// "balanced" | "layer" | "strided"; errc::invalid_argument naming the value otherwise.
result<fragment_strategy> parse_fragment_strategy(std::string_view name);
/// Short name of a strategy.
std::string_view to_string(fragment_strategy s) noexcept;

/// One tensor's place inside a fragment vector.
struct fragment_tensor {
  /// Index into the model's tensor list.
  size_t tensor_index = 0;
  std::string name;
  /// Offset of the tensor in the fragment vector, elements.
  size_t fragment_offset = 0;
  /// Offset of the tensor in the flat parameter vector, elements (tensor_info::offset).
  size_t flat_offset = 0;
  size_t numel = 0;
  /// Merged by weighted average, not RDA (tensor_info::is_embedding).
  bool is_embedding = false;
};

/// The tensors of one fragment, in fragment-vector order (ascending tensor index).
struct fragment_layout {
  int fragment_id = 0;
  std::vector<fragment_tensor> tensors;
  /// Length of the fragment vector (Σ numel), elements.
  size_t numel = 0;
};

/// The whole assignment.
struct fragment_plan {
  fragment_strategy strategy = fragment_strategy::balanced;
  std::vector<fragment_layout> fragments;  // (P)
  /// fragment_of_tensor[i] = the fragment holding tensor i.
  std::vector<int> fragment_of_tensor;
  /// Σ numel over all tensors.
  size_t total_numel = 0;

  int num_fragments() const noexcept { return static_cast<int>(fragments.size()); }
  /// max fragment numel / min fragment numel (≥ 1; infinity when some fragment is empty).
  double imbalance() const noexcept;
};

/// Assign `tensors` to P fragments. Errors (errc::invalid_argument, message names the field):
/// P < 1; P > number of tensors; `layer` with P > number of blocks; a tensor with numel 0 or a
/// tensor range overlapping another in the flat buffer.
result<fragment_plan> make_fragment_plan(const std::vector<tensor_info>& tensors, int num_fragments,
                                         fragment_strategy strategy);
/// Same with the strategy by name (errc::invalid_argument for an unknown name).
result<fragment_plan> make_fragment_plan(const std::vector<tensor_info>& tensors, int num_fragments,
                                         std::string_view strategy);

/// frag (layout.numel) ← the fragment's tensors from flat (host memory, ≥ max flat offset+numel).
void gather_fragment(const fragment_layout& layout, const float* flat, float* frag);
/// flat ← frag for the fragment's tensors; other elements of flat are untouched.
void scatter_fragment(const fragment_layout& layout, const float* frag, float* flat);
/// Same in a backend's memory space (both pointers are backend memory): one copy per tensor.
void gather_fragment(kernels::backend& be, const fragment_layout& layout, const float* flat,
                     float* frag);
void scatter_fragment(kernels::backend& be, const fragment_layout& layout, const float* frag,
                      float* flat);

}  // namespace dd
