// apps/dd_node/export.cpp — `dd-node export RUN_DIR|FILE --format hf OUT`: a trained GPT as a
// directory Hugging Face transformers loads without custom code (runtime/hf_export.hpp):
// config.json, model.safetensors (transformers' names and layouts), generation_config.json,
// tokenizer.json + tokenizer_config.json (the run's tokenizer: bytes, or the SentencePiece
// model its token data names; tokenizer.model is copied too). MoE and ViT models are refused.
// Exit codes: 0 ok, 1 runtime failure (unreadable model, I/O), 2 bad flags or a model that does
// not map.
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/dd_node/commands.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/hf_export.hpp"
#include "runtime/model_file.hpp"
#include "runtime/subword.hpp"
#include "util/files.hpp"
#include "util/flags.hpp"

namespace dd::app {

namespace {

void write_json(const std::string& path, const nlohmann::json& j) {
  if (auto st = util::write_file_atomic(path, j.dump(2) + "\n"); !st)
    throw std::runtime_error(st.message);
}

}  // namespace

/// Entry point of `dd-node export`; argv[0] is "export".
int export_main(int argc, char** argv) {
  std::string format, tokenizer;
  std::vector<std::string> paths;
  util::flag_table table(
      "dd-node export", "RUN_DIR|FILE --format hf OUT [flags]",
      "Writes a trained GPT (RUN_DIR's model.safetensors, a checkpoint, or the FILE given) as\n"
      "a Hugging Face transformers GPT-2 directory OUT: config.json, model.safetensors\n"
      "(transformers' names; Conv1D weights transposed), generation_config.json,\n"
      "tokenizer.json and tokenizer_config.json (AutoModelForCausalLM / AutoTokenizer load it\n"
      "without custom code). model.kind \"moe_gpt\" and \"vit\" are refused.");
  table.positionals(&paths, 2, 2, "RUN_DIR|FILE OUT", "the model, then the directory written")
      .text("--format", &format, "hf", "the output format (only hf)")
      .text("--tokenizer", &tokenizer, "T",
            "byte, or a SentencePiece model (file, or a directory holding tokenizer.model); "
            "default: the one the run's data names")
      .epilog(
          "Exit status: 0 ok; 1 unreadable model or I/O failure; 2 bad flags or a model that\n"
          "does not map to GPT-2.\n");
  if (auto rc = table.parse(argc, argv)) return *rc;
  const std::string& where = paths[0];
  const std::string& out = paths[1];
  if (format.empty()) {
    std::fprintf(stderr, "dd-node export: --format is required (--format hf)\n");
    table.print_help(stderr);
    return 2;
  }
  if (format != "hf") {
    std::fprintf(stderr, "dd-node export: --format '%s' is not supported (only hf)\n",
                 format.c_str());
    return 2;
  }
  model_config cfg;
  st_file file;
  std::string path;
  try {
    path = resolve_model_path(where);
    file = read_safetensors(path);
    auto it = file.metadata.find("config");
    if (it == file.metadata.end())
      throw std::runtime_error(fmt::format("model '{}': metadata 'config' is missing", path));
    cfg = model_config::from_json(nlohmann::json::parse(it->second));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node export: %s\n", e.what());
    return 1;
  }
  nlohmann::json config;
  try {
    config = hf_gpt2_config(cfg);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "dd-node export: %s: %s\n", path.c_str(), e.what());
    return 2;
  }
  try {
    if (tokenizer.empty()) {
      tokenizer = "byte";
      if (auto it = file.metadata.find("eval"); it != file.metadata.end())
        tokenizer = eval_spec::from_json(nlohmann::json::parse(it->second)).tokenizer;
    }
    if (auto st = util::make_dirs(out); !st) throw std::runtime_error(st.message);
    namespace fs = std::filesystem;
    st_file hf;
    hf.tensors = to_hf_tensors(cfg, file);
    hf.metadata["format"] = "pt";  // transformers refuses a safetensors file without it
    write_safetensors((fs::path(out) / "model.safetensors").string(), hf);
    write_json((fs::path(out) / "config.json").string(), config);
    write_json((fs::path(out) / "generation_config.json").string(), {{"do_sample", false}});
    if (tokenizer == "byte") {
      write_json((fs::path(out) / "tokenizer.json").string(), hf_byte_tokenizer_json());
    } else {
      const subword_tokenizer tok(tokenizer);
      if (tok.vocab_size() > cfg.vocab)
        throw std::invalid_argument(
            fmt::format("tokenizer '{}' has {} pieces, more than the model's vocabulary {}",
                        tok.path(), tok.vocab_size(), cfg.vocab));
      write_json((fs::path(out) / "tokenizer.json").string(), tok.hf_tokenizer_json());
      std::error_code ec;
      fs::copy_file(tok.path(), fs::path(out) / "tokenizer.model",
                    fs::copy_options::overwrite_existing, ec);
      if (ec)
        throw std::runtime_error(
            fmt::format("cannot copy '{}' into '{}': {}", tok.path(), out, ec.message()));
    }
    write_json((fs::path(out) / "tokenizer_config.json").string(),
               hf_tokenizer_config_json(cfg.context));
    std::printf("exported %s (%d layers, width %d, vocab %d, context %d; tokenizer %s) to %s\n",
                path.c_str(), cfg.layers, cfg.width, cfg.vocab, cfg.context, tokenizer.c_str(),
                out.c_str());
    return 0;
  } catch (const std::exception&) {
    return exit_status_of_exception("dd-node export");
  }
}

}  // namespace dd::app
