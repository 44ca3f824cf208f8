// runtime/vit_config.hpp — the shape of a vision transformer (runtime/vit.hpp), kept apart so
// that runtime/model.hpp's model_config can hold it without including the model.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dd {

/// How the classification head reads the token sequence.
enum class vit_pooling : uint8_t { cls, mean };

/// "cls" / "mean".
const char* to_string(vit_pooling p);
/// Throws std::invalid_argument naming the value unless it is "cls" or "mean".
vit_pooling vit_pooling_from_string(const std::string& s);

/// Shape of a ViT. Defaults: the MNIST example's model (28×28, 7×7 patches: 16 patch tokens).
struct vit_config {
  int rows = 28;     ///< image height in pixels
  int cols = 28;     ///< image width in pixels
  int patch = 7;     ///< p: patch side; must divide rows and cols
  int classes = 10;  ///< K: output classes
  int layers = 2;    ///< L: transformer blocks
  int heads = 4;     ///< NH: attention heads; width % heads == 0
  int width = 64;    ///< C: token width
  vit_pooling pooling = vit_pooling::cls;

  /// Patch tokens P = (rows/p)·(cols/p).
  int patches() const { return (rows / patch) * (cols / patch); }
  /// Tokens per image T = P (+1 with cls pooling).
  int tokens() const { return patches() + (pooling == vit_pooling::cls ? 1 : 0); }

  /// Throws std::invalid_argument naming the field when a value is out of range (every integer
  /// >= 1, classes >= 2, patch divides rows and cols, width % heads == 0).
  void validate() const;
  /// {"rows","cols","patch","classes","layers","heads","width","pooling":"cls"|"mean"}
  nlohmann::json to_json() const;
  /// Reads all eight fields (required); throws std::invalid_argument naming a missing or
  /// mistyped field, then validate()s.
  static vit_config from_json(const nlohmann::json& j);
  bool operator==(const vit_config& o) const {
    return rows == o.rows && cols == o.cols && patch == o.patch && classes == o.classes &&
           layers == o.layers && heads == o.heads && width == o.width && pooling == o.pooling;
  }
  bool operator!=(const vit_config& o) const { return !(*this == o); }
};

}  // namespace dd
