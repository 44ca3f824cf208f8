// runtime/tensor_info.hpp — the description of one named tensor inside a model's flat parameter
// buffer. The model (runtime/gpt.hpp) produces the list; fragmentation (runtime/fragments.hpp),
// the merge (runtime/merge.hpp) and checkpoints consume it. Plain value type; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dd {

/// One named tensor view into a flat float32 parameter buffer.
struct tensor_info {
  /// Stable name, e.g. "wte", "wpe", "h.0.attn.qkv.weight", "ln_f.bias".
  std::string name;
  /// Offset into the flat buffer, in elements.
  size_t offset = 0;
  /// Number of elements (product of shape).
  size_t numel = 0;
  /// Shape, outermost first, e.g. {3*C, C}.
  std::vector<int64_t> shape;
  /// True for token and position embeddings: merged by weighted average, not RDA (ALGORITHM.md).
  bool is_embedding = false;
  /// Transformer block index, or -1 for tensors outside the blocks (embeddings, final norm).
  int layer = -1;
  /// True when AdamW applies weight decay to it (2-D weights; not biases, norms or embeddings'
  /// choice is the model's).
  bool decay = false;
};

}  // namespace dd
