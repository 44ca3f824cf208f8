// apps/dd_node/commands.cpp — the subcommand table (see commands.hpp).
#include "apps/dd_node/commands.hpp"

#include <cstdio>
#include <exception>
#include <stdexcept>

namespace dd::app {

// Each subcommand's entry point, defined in its own file.
int train_main(int argc, char** argv);
int resolve_main(int argc, char** argv);
int run_main(int argc, char** argv);
int syncer_main(int argc, char** argv);
int learner_main(int argc, char** argv);
int launch_main(int argc, char** argv);
int status_main(int argc, char** argv);
int drain_main(int argc, char** argv);
int sample_main(int argc, char** argv);
int eval_main(int argc, char** argv);
int plot_main(int argc, char** argv);
int export_main(int argc, char** argv);
int tokenize_main(int argc, char** argv);
int certs_main(int argc, char** argv);

const std::vector<command>& commands() {
  static const std::vector<command> table = {
      {"train", "train one learner alone (no syncer) and write summary.json", &train_main},
      {"run", "run an experiment's whole cluster in this process (the main job)", &run_main},
      {"syncer", "run the syncer node of a cluster (monitor, owners, evaluator, job)",
       &syncer_main},
      {"learner", "run learners that join a syncer over the network", &learner_main},
      {"launch", "start a cluster of processes on this host and supervise them", &launch_main},
      {"status", "print the live view of a running cluster (learners, leases, versions)",
       &status_main},
      {"drain", "remove a learner of a running cluster gracefully", &drain_main},
      {"certs", "make a throwaway CA and node certificates for mutual TLS (--tls-*)", &certs_main},
      {"sample", "print text sampled from a run's model.safetensors (or a checkpoint)",
       &sample_main},
      {"eval", "report a trained model's validation loss on its run's evaluation windows",
       &eval_main},
      {"plot", "write PNG figures of a run, a comparison table or dd-goodput's output", &plot_main},
      {"export", "write a trained GPT as a Hugging Face transformers directory (--format hf)",
       &export_main},
      {"tokenize", "train a subword tokenizer and write token shards for data.kind = \"tokens\"",
       &tokenize_main},
      {"resolve", "print the fully resolved configuration of an experiment file", &resolve_main},
  };
  return table;
}

int exit_status_of_exception(const char* who) {
  try {
    throw;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return 1;
  }
}

}  // namespace dd::app
