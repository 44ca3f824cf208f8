// runtime/model_file.hpp — the trained model a run leaves behind: `model.safetensors`.
//
// The file is a checkpoint (runtime/checkpoint.hpp: safetensors, atomic write, CRC-32C in
// dd_crc32c) holding only the model's tensors, under the names of gpt_tensors() (wte, wpe,
// h.<i>.…, ln_f.…), all F32, row-major, no optimizer state. Its "__metadata__" holds:
//   format      "dd-gpt-1" (the checkpoint format)
//   model_kind  "gpt"
//   config      the model config as JSON, e.g. {"vocab":256,"context":128,"layers":4,...}
//   eval        the evaluation it was scored with, as JSON (eval_spec::to_json: data file,
//               split, batch, seq_len, windows and every window's start)
//   val_loss    that evaluation's loss, nats/token ("%.17g"), and whatever the writer adds (run
//               id, experiment, digest, fragment versions).
// Readers: `dd-node sample` / `dd-node eval`, and any safetensors reader (Python `safetensors`,
// PyTorch: tests/apps/model_file_check.py runs an independent NumPy forward on it).
//
// These functions are the seam between a model file and the model: they read any kind that
// make_model builds (runtime/model.hpp; the kind comes from the metadata "config"). Any thread;
// no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/data.hpp"
#include "runtime/gpt.hpp"

namespace dd {

/// The fixed validation windows of an evaluation (runtime/eval.hpp, evaluate_windows): window w,
/// w = 0 .. windows − 1, is the `seq_len` + 1 tokens starting at token (w mod W)·seq_len of the
/// validation split, W = (validation_tokens − 1) / seq_len; `batch` windows go through one
/// forward pass (it changes no window). The validation split is the byte tokens
/// [validation_offset, validation_offset + validation_tokens) of `data_file`
/// (validation_offset = floor(file bytes · train_fraction), runtime/data.hpp).
struct eval_spec {
  std::string data_file;  ///< the text file, as the run named it
  double train_fraction = 0.9;
  size_t validation_offset = 0;  ///< first validation token = byte offset in the file
  size_t validation_tokens = 0;  ///< tokens in the validation split
  int batch = 16;                ///< windows per forward pass
  int seq_len = 128;             ///< T
  std::int64_t windows = 128;    ///< windows scored (a resolved count, >= 1)
  std::string backend = "cpu";   ///< the backend the run evaluated on
  /// data.kind = "tokens": the token files (then data_file is the first one), the validation
  /// files (empty: split by train_fraction), their format and the vocabulary ids are checked
  /// against; empty token_files = a text file.
  std::vector<std::string> token_files, token_validation_files;
  std::string token_format = "llmc";
  int token_vocab = 0;
  /// "byte", or the SentencePiece model the tokens came from (bits per byte, sampling).
  std::string tokenizer = "byte";

  /// The data the windows are cut from: the text file, or the token files.
  text_dataset load_data() const;
  /// Bits per byte per nat on these windows of `data` (runtime/eval.hpp): the byte tokenizer
  /// on a text file gives 1/ln 2; a SentencePiece tokenizer counts its pieces' bytes; token
  /// data without a tokenizer gives NaN (its bytes are unknown).
  double bits_per_byte_per_nat(const text_dataset& data) const;

  /// Start of every window (token offset inside the validation split), `windows` values.
  /// Throws std::invalid_argument as evaluate_windows does (batch, seq_len, windows < 1, or
  /// fewer than seq_len + 1 validation tokens).
  std::vector<size_t> window_starts() const;
  /// True when the windows cover every one of the W windows of the split at least once.
  bool covers_split() const;
  /// Where the validation split comes from, for a line a user reads: "the validation split of
  /// F (tokens [A, B), train_fraction X)" (a text file, or token files split by train_fraction;
  /// "F and N more token files" when there are several), or "the validation files F, G (N
  /// tokens)" when the run named its own validation files (token_validation_files).
  std::string split_description() const;
  /// {"data_file", "train_fraction", "split": "validation", "validation_offset",
  ///  "validation_tokens", "batch", "seq_len", "windows",
  ///  "covers_split", "backend", "window_rule" (the sentence above), "window_starts": [...]}.
  nlohmann::json to_json() const;
  /// Reads to_json()'s fields (window_starts and covers_split are derived, not read); a record
  /// without "windows" (written before the windows were counted apart from the batch) holds
  /// "batches" and scored batches·batch windows. Throws std::invalid_argument naming a missing
  /// or mistyped field.
  static eval_spec from_json(const nlohmann::json& j);
};

/// Why two runs' final evaluations (summary.json "final_eval", eval_spec::to_json or a vit run's
/// record) were not scored on the same windows: "FIELD: A vs B" for the first of data_kind,
/// data_file, files, validation_files, train_fraction, validation_offset, validation_tokens,
/// seq_len, windows, images, labels, validation_first and validation_samples that differs; empty
/// when they are the same windows (the batch and the backend change no window).
std::string scoring_difference(const nlohmann::json& a, const nlohmann::json& b);

/// The file name a run writes its final model to, inside the run directory.
inline constexpr const char* model_file_name = "model.safetensors";

/// Writes `model` to `path` as a model file (see the file comment), atomically; `metadata` is
/// added to the header (format, model_kind = model.config().kind and config are set here). Throws
/// std::runtime_error naming the path and errno's text when the write fails (the old file, if any,
/// stays).
void write_model_file(const std::string& path, const model& model,
                      const std::map<std::string, std::string>& metadata);

/// `where` is a model file, or a directory holding model.safetensors (a run directory of
/// `dd-node run`/`syncer`/`launch`) or checkpoint.safetensors (of `dd-node train`). Returns
/// the file path; throws std::runtime_error naming `where` and the names looked for.
std::string resolve_model_path(const std::string& where);

/// A model file of any kind (runtime/model.hpp make_model), e.g. a "vit" run's model.safetensors.
struct loaded_any_model {
  /// The backend load_model() made for the model (declared first: it outlives `model`); null
  /// from read_any_model_file(), whose caller owns the backend.
  std::unique_ptr<kernels::backend> backend;
  std::string path;  ///< the file actually read
  std::map<std::string, std::string> metadata;
  std::unique_ptr<dd::model> model;
};

/// Reads the model at resolve_model_path(`where`) onto `be` whatever its kind: the metadata
/// "config" through model_config::from_json and make_model (the kind comes from the config).
/// Throws std::runtime_error naming the file and the field or tensor at fault (no config, bad
/// config, unknown kind, missing tensor, wrong shape, damaged file).
loaded_any_model read_any_model_file(const std::string& where, kernels::backend& be);

/// What `dd-node eval` and `dd-node sample` do with RUN_DIR|FILE: makes the backend named
/// `backend` (kernels::make_backend with `threads` CPU threads, 0 = all; call
/// kernels::init_all_backends() first for "cuda") and reads the model at
/// resolve_model_path(`where`) onto it (read_any_model_file); the result owns both. Throws
/// kernels::backend_error for a backend that cannot be made, std::runtime_error as
/// read_any_model_file.
loaded_any_model load_model(const std::string& where, const std::string& backend, int threads);

}  // namespace dd
