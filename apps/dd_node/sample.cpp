// apps/dd_node/sample.cpp — `dd-node sample RUN_DIR|FILE --prompt TEXT [...]`: text from a
// trained model (runtime/sample.hpp). The model is the run directory's model.safetensors (or a
// `dd-node train` directory's checkpoint.safetensors, or the file named). One line on stderr
// names the file, the seed and the options; stdout gets the prompt followed by the new text.
// Exit codes: 0 ok, 1 runtime failure (unreadable or damaged model file, backend), 2 bad flags.
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "apps/dd_node/node_flags.hpp"
#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/model_file.hpp"
#include "runtime/sample.hpp"
#include "runtime/subword.hpp"
#include "runtime/tokenizer.hpp"
#include "util/parse.hpp"

namespace dd::app {

namespace {

void print_sample_help(FILE* f) {
  const sample_options d;
  std::fprintf(
      f, "%s",
      fmt::format(
          "usage: dd-node sample RUN_DIR|FILE --prompt TEXT [--tokens N] [--temperature T]\n"
          "                      [--top-k K] [--seed S] [--tokenizer byte|PATH]\n"
          "                      [--backend NAME] [--threads N]\n"
          "Prints the prompt and N new tokens sampled from a trained GPT: RUN_DIR's\n"
          "model.safetensors (written at the end of dd-node run / syncer / launch) or\n"
          "checkpoint.safetensors (dd-node train), or the safetensors FILE given.\n"
          "  --prompt TEXT      the text to continue (at least one byte)\n"
          "  --tokens N         new tokens (bytes, or subword pieces) to generate, >= 0\n"
          "                     (default {})\n"
          "  --temperature T    divides the logits; 0 = greedy (default {})\n"
          "  --top-k K          sample among the K most likely bytes; 0 = all (default {})\n"
          "  --seed S           seed of the draws, printed on stderr (default {})\n"
          "  --tokenizer T      byte, or a SentencePiece model (file or directory holding\n"
          "                     tokenizer.model); default: the one the run's data names\n"
          "  --backend NAME     cpu | reference | cuda (default cpu)\n"
          "  --threads N        CPU threads for the backend, 0 = all (default 1)\n"
          "Exit status: 0 ok; 1 unreadable model or backend failure; 2 bad flags.\n",
          d.tokens, d.temperature, d.top_k, d.seed)
          .c_str());
}

}  // namespace

/// Entry point of `dd-node sample`; argv[0] is "sample".
int sample_main(int argc, char** argv) {
  std::string prompt, tokenizer;
  bool have_prompt = false;
  model_args m_args;
  m_args.backend = "cpu";
  sample_options opt;
  flag_cursor f("dd-node sample", argc, argv);
  auto bad = [](const char* flag, const char* what, const char* v) {
    std::fprintf(stderr, "dd-node sample: %s needs %s, got '%s'\n", flag, what, v);
    return 2;
  };
  while (f.next()) {
    const std::string a = f.arg();
    if (a == "--help" || a == "-h") {
      print_sample_help(stdout);
      return 0;
    } else if (a == "--prompt") {
      const char* v = f.value("--prompt");
      if (v == nullptr) return 2;
      prompt = v;
      have_prompt = true;
    } else if (a == "--tokenizer") {
      const char* v = f.value("--tokenizer");
      if (v == nullptr) return 2;
      tokenizer = v;
    } else if (a == "--tokens") {
      const char* v = f.value("--tokens");
      if (v == nullptr) return 2;
      if (!util::parse_number_in(v, opt.tokens, 0, 1 << 24))
        return bad("--tokens", "a whole number in 0..16777216", v);
    } else if (a == "--temperature") {
      const char* v = f.value("--temperature");
      if (v == nullptr) return 2;
      if (!parse_nonneg(v, opt.temperature)) return bad("--temperature", "a number >= 0", v);
    } else if (a == "--top-k") {
      const char* v = f.value("--top-k");
      if (v == nullptr) return 2;
      if (!util::parse_number_in(v, opt.top_k, 0, 1 << 24))
        return bad("--top-k", "a whole number >= 0", v);
    } else if (a == "--seed") {
      const char* v = f.value("--seed");
      if (v == nullptr) return 2;
      unsigned long long s = 0;
      if (!util::parse_number(v, s)) return bad("--seed", "a whole number >= 0", v);
      opt.seed = s;
    } else if (!m_args.take(f, a, print_sample_help)) {
      return 2;
    }
  }
  const std::string& where = m_args.where;
  if (where.empty() || !have_prompt || prompt.empty()) {
    std::fprintf(stderr, "dd-node sample: %s\n",
                 where.empty() ? "no RUN_DIR or FILE given"
                               : "--prompt TEXT (at least one byte) is required");
    print_sample_help(stderr);
    return 2;
  }
  try {
    kernels::init_all_backends();
    auto m = load_model(where, m_args.backend, m_args.threads);
    auto* model = dynamic_cast<gpt*>(m.model.get());
    if (model == nullptr)
      throw std::runtime_error(fmt::format("model '{}': kind '{}'; dd-node sample reads only 'gpt'",
                                           m.path, m.model->config().kind));
    auto loss = m.metadata.find("val_loss");
    std::fprintf(stderr,
                 "dd-node sample: model %s (%zu parameters%s), seed %llu, temperature %g, "
                 "top-k %d, %d tokens\n",
                 m.path.c_str(), m.model->num_params(),
                 loss != m.metadata.end() ? (", val_loss " + loss->second).c_str() : "",
                 static_cast<unsigned long long>(opt.seed), opt.temperature, opt.top_k, opt.tokens);
    if (tokenizer.empty()) {
      tokenizer = "byte";
      if (auto it = m.metadata.find("eval"); it != m.metadata.end())
        tokenizer = eval_spec::from_json(nlohmann::json::parse(it->second)).tokenizer;
    }
    std::string text;
    if (tokenizer == "byte") {
      text = byte_decode(sample_tokens(*model, byte_encode(prompt), opt));
    } else {
      const subword_tokenizer tok(tokenizer);
      text = tok.decode(sample_tokens(*model, tok.encode(prompt), opt));
    }
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "dd-node sample: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node sample: %s\n", e.what());
    return 1;
  }
}

}  // namespace dd::app
