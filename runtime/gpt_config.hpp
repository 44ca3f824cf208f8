// runtime/gpt_config.hpp — the shape of a GPT-style transformer (runtime/gpt.hpp), shared by every
// model kind built on its blocks (runtime/model.hpp: model_config extends it). Plain value type;
// any thread.
#pragma once

#include <nlohmann/json.hpp>

namespace dd {

/// Shape of a GPT. Defaults are the project's Tiny-Shakespeare model (0.84M parameters).
struct gpt_config {
  int vocab = 256;    ///< V: vocabulary size (byte-level tokenizer).
  int context = 128;  ///< maxT: longest sequence, rows of wpe.
  int layers = 4;     ///< L: transformer blocks.
  int heads = 4;      ///< NH: attention heads; width must be divisible by heads.
  int width = 128;    ///< C: residual stream width.

  /// Throws std::invalid_argument naming the field when a value is out of range
  /// (every field >= 1, width % heads == 0).
  void validate() const;
  /// {"vocab":..,"context":..,"layers":..,"heads":..,"width":..}
  nlohmann::json to_json() const;
  /// Reads the five fields (all required); throws std::invalid_argument naming a missing or
  /// non-integer field, then validate()s.
  static gpt_config from_json(const nlohmann::json& j);
  bool operator==(const gpt_config& o) const {
    return vocab == o.vocab && context == o.context && layers == o.layers && heads == o.heads &&
           width == o.width;
  }
  bool operator!=(const gpt_config& o) const { return !(*this == o); }
};

}  // namespace dd
