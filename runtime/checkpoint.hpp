// runtime/checkpoint.hpp — checkpoints in the safetensors format
// (https://huggingface.co/docs/safetensors: 8-byte little-endian header length N, N bytes of JSON
// header {"<name>": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian tensor bytes; offsets are relative to the end of the header).
//
// Files are written atomically (util::write_file_atomic: a temporary file in the same directory,
// fsync, rename over the target, fsync the directory) — a crash or a full disk leaves either the
// old or the new file, never a torn one (ALGORITHM.md, Recovery). Every file we write carries
// the CRC-32C of its data section in its metadata ("dd_crc32c", 8 lowercase hex digits); a load
// refuses a file whose checksum is present and wrong, and accepts one without it (a file from
// another tool) unless st_read_options::require_checksum. Loading trusts nothing: file size vs
// header, header JSON, dtype, offsets in range and non-overlapping, sizes vs shapes; every error
// names the file and the tensor or field. Only F32 tensors are written or accepted. Any thread; no
// shared state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dd {

class model;
class adamw;

/// One host tensor of a safetensors file.
struct st_tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  ///< numel = product of shape
};

/// A whole safetensors file in host memory.
struct st_file {
  std::vector<st_tensor> tensors;               ///< in file order of data offsets
  std::map<std::string, std::string> metadata;  ///< the "__metadata__" object

  /// The tensor called `name`, or nullptr.
  const st_tensor* find(const std::string& name) const;
};

/// Metadata key of the data section's CRC-32C (8 lowercase hex digits).
inline constexpr const char* st_checksum_key = "dd_crc32c";

/// How a load treats a file without a checksum.
struct st_read_options {
  /// Refuse a file that carries no dd_crc32c (dd-node train --require-checksum).
  bool require_checksum = false;
};

/// Writes `file` to `path` atomically (see the file comment), with metadata dd_crc32c added.
/// Tensors are laid out in the given order; the header is padded with spaces to a multiple of 8
/// bytes. Throws std::runtime_error naming the path, the failing system call and errno's text (a
/// full disk leaves the old file, or none); std::invalid_argument when a tensor's data size does
/// not match its shape or a name repeats.
void write_safetensors(const std::string& path, const st_file& file);

/// Reads and validates a safetensors file. Throws std::runtime_error "checkpoint '<path>': ..."
/// naming the tensor or field at fault (not a regular file, short file, header length beyond
/// the file, bad JSON, dd_crc32c present and not matching the data section, no dd_crc32c while
/// `options.require_checksum`, dtype other than F32, malformed shape or data_offsets, offsets out
/// of range, overlapping or leaving gaps, size not matching the shape, non-string metadata). A
/// file without a checksum loads; its metadata then lacks dd_crc32c (the caller may warn).
st_file read_safetensors(const std::string& path, const st_read_options& options = {});

/// The validation of read_safetensors over file bytes already in memory (`bytes`: the whole
/// file); `path` only names the file in errors. Same errors (std::runtime_error
/// "checkpoint '<path>': ..."), never another exception for bad bytes. The fuzz target
/// tests/fuzz/safetensors_fuzz.cpp calls it.
st_file parse_safetensors(std::string_view bytes, const std::string& path,
                          const st_read_options& options = {});

/// Writes a model checkpoint: every model tensor under its own name; when `opt` is given, its
/// moments as "adamw.m.<name>" and "adamw.v.<name>" and metadata "adamw_steps". `metadata` is
/// added to "__metadata__" together with "format" = "dd-gpt-1" for kind "gpt" ("dd-<kind>-1"
/// otherwise) and "config" = the model config as JSON (model_config::to_json, kind included).
void save_checkpoint(const std::string& path, const model& m, const adamw* opt,
                     const std::map<std::string, std::string>& metadata);

/// Loads a checkpoint written by save_checkpoint into `model` (and `opt`, which then requires the
/// moments). Validates everything before touching the model: every expected tensor must be
/// present with the model's exact shape, else std::runtime_error naming the file and the tensor.
/// Returns the file's metadata (holding dd_crc32c unless the file came from another tool).
std::map<std::string, std::string> load_checkpoint(const std::string& path, model& m, adamw* opt,
                                                   const st_read_options& options = {});

}  // namespace dd
