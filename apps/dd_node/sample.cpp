// apps/dd_node/sample.cpp — `dd-node sample RUN_DIR|FILE --prompt TEXT [...]`: text from a
// trained model (runtime/sample.hpp). The model is the run directory's model.safetensors (or a
// `dd-node train` directory's checkpoint.safetensors, or the file named). One line on stderr
// names the file, the seed and the options; stdout gets the prompt followed by the new text.
// Exit codes: 0 ok, 1 runtime failure (unreadable or damaged model file, backend), 2 bad flags.
#include <cstdio>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "apps/dd_node/commands.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/model_file.hpp"
#include "runtime/sample.hpp"
#include "runtime/subword.hpp"
#include "runtime/tokenizer.hpp"
#include "util/flags.hpp"

namespace dd::app {

/// Entry point of `dd-node sample`; argv[0] is "sample".
int sample_main(int argc, char** argv) {
  std::string prompt, tokenizer;
  bool have_prompt = false;
  model_args m_args;
  m_args.backend = "cpu";
  sample_options opt;
  const sample_options d;
  util::flag_table t("dd-node sample", "RUN_DIR|FILE --prompt TEXT [flags]",
                     "Prints the prompt and N new tokens sampled from a trained GPT: RUN_DIR's\n"
                     "model.safetensors (written at the end of dd-node run / syncer / launch) or\n"
                     "checkpoint.safetensors (dd-node train), or the safetensors FILE given.");
  add_model_flags(t, m_args, "cpu");
  t.custom("--prompt", "TEXT", "the text to continue (at least one byte)",
           [&](const std::string& v) {
             prompt = v;
             have_prompt = true;
             return std::string();
           })
      .count(
          "--tokens", &opt.tokens, 0, 1 << 24, "N",
          fmt::format("new tokens (bytes, or subword pieces) to generate (default {})", d.tokens))
      .number("--temperature", &opt.temperature, 0, std::numeric_limits<double>::infinity(), "T",
              fmt::format("divides the logits; 0 = greedy (default {})", d.temperature))
      .count("--top-k", &opt.top_k, 0, 1 << 24, "K",
             fmt::format("sample among the K most likely bytes; 0 = all (default {})", d.top_k))
      .count("--seed", &opt.seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(), "S",
             fmt::format("seed of the draws, printed on stderr (default {})", d.seed))
      .text("--tokenizer", &tokenizer, "T",
            "byte, or a SentencePiece model (file or directory holding tokenizer.model); "
            "default: the one the run's data names")
      .epilog("Exit status: 0 ok; 1 unreadable model or backend failure; 2 bad flags.\n");
  if (auto rc = t.parse(argc, argv)) return *rc;
  const std::string& where = m_args.where.front();
  if (!have_prompt || prompt.empty()) {
    std::fprintf(stderr, "dd-node sample: --prompt TEXT (at least one byte) is required\n");
    t.print_help(stderr);
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
  } catch (const std::exception&) {
    return exit_status_of_exception("dd-node sample");
  }
}

}  // namespace dd::app
