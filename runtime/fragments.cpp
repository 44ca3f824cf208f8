// runtime/fragments.cpp — fragment plans (balanced / layer / strided) and gather/scatter.
#include "runtime/fragments.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace dd {

result<fragment_strategy> parse_fragment_strategy(std::string_view name) {
  if (name == "balanced") return fragment_strategy::balanced;
  if (name == "layer") return fragment_strategy::layer;
  if (name == "strided") return fragment_strategy::strided;
  return wire_error{errc::invalid_argument,
                    "fragmentation strategy '" + std::string(name) +
                        "' is unknown (expected balanced, layer or strided)"};
}

std::string_view to_string(fragment_strategy s) noexcept {
  switch (s) {
    case fragment_strategy::balanced: return "balanced";
    case fragment_strategy::layer: return "layer";
    case fragment_strategy::strided: return "strided";
  }
  return "?";
}

double fragment_plan::imbalance() const noexcept {
  if (fragments.empty()) return 1.0;
  size_t lo = std::numeric_limits<size_t>::max();
  size_t hi = 0;
  for (const auto& f : fragments) {
    lo = std::min(lo, f.numel);
    hi = std::max(hi, f.numel);
  }
  if (lo == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(hi) / static_cast<double>(lo);
}

namespace {

// assignment[i] = fragment of tensor i.
std::vector<int> assign_balanced(const std::vector<tensor_info>& t, int p) {
  std::vector<size_t> order(t.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return t[a].numel > t[b].numel; });
  std::vector<size_t> load(static_cast<size_t>(p), 0);
  std::vector<int> assignment(t.size(), 0);
  for (size_t i : order) {
    // Lightest fragment; min_element returns the first (lowest index) on ties.
    auto it = std::min_element(load.begin(), load.end());
    assignment[i] = static_cast<int>(it - load.begin());
    *it += t[i].numel;
  }
  return assignment;
}

std::vector<int> assign_strided(const std::vector<tensor_info>& t, int p) {
  std::vector<int> assignment(t.size());
  for (size_t i = 0; i < t.size(); ++i)
    assignment[i] = static_cast<int>(i % static_cast<size_t>(p));
  return assignment;
}

result<std::vector<int>> assign_layer(const std::vector<tensor_info>& t, int p) {
  std::vector<int> layers;
  size_t first_block_tensor = t.size();
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].layer >= 0) {
      layers.push_back(t[i].layer);
      first_block_tensor = std::min(first_block_tensor, i);
    }
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  const size_t nl = layers.size();
  if (nl == 0 && p > 1) {
    return wire_error{
        errc::invalid_argument,
        "fragments: strategy 'layer' needs tensors with layer >= 0 for P = " + std::to_string(p)};
  }
  if (nl > 0 && static_cast<size_t>(p) > nl) {
    return wire_error{errc::invalid_argument, "fragments: P = " + std::to_string(p) +
                                                  " exceeds the " + std::to_string(nl) +
                                                  " transformer blocks (strategy 'layer')"};
  }
  // Block rank r (0..nl-1) -> fragment: P contiguous ranges, the first nl mod P one larger.
  std::vector<int> block_fragment(nl, 0);
  if (nl > 0) {
    const size_t base = nl / static_cast<size_t>(p);
    const size_t extra = nl % static_cast<size_t>(p);
    size_t r = 0;
    for (size_t f = 0; f < static_cast<size_t>(p); ++f) {
      const size_t len = base + (f < extra ? 1 : 0);
      for (size_t k = 0; k < len; ++k) block_fragment[r++] = static_cast<int>(f);
    }
  }
  std::vector<int> assignment(t.size(), 0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].layer >= 0) {
      const size_t rank = static_cast<size_t>(
          std::lower_bound(layers.begin(), layers.end(), t[i].layer) - layers.begin());
      assignment[i] = block_fragment[rank];
    } else {
      assignment[i] = i < first_block_tensor ? 0 : p - 1;
    }
  }
  return assignment;
}

}  // namespace

result<fragment_plan> make_fragment_plan(const std::vector<tensor_info>& tensors, int num_fragments,
                                         fragment_strategy strategy) {
  if (num_fragments < 1) {
    return wire_error{errc::invalid_argument, "fragments: P (number of fragments) = " +
                                                  std::to_string(num_fragments) + " must be >= 1"};
  }
  if (static_cast<size_t>(num_fragments) > tensors.size()) {
    return wire_error{errc::invalid_argument, "fragments: P = " + std::to_string(num_fragments) +
                                                  " exceeds the " + std::to_string(tensors.size()) +
                                                  " tensors of the model"};
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel == 0) {
      return wire_error{errc::invalid_argument,
                        "fragments: tensor '" + tensors[i].name + "' has numel 0"};
    }
  }
  {  // flat ranges must not overlap
    std::vector<size_t> by_offset(tensors.size());
    std::iota(by_offset.begin(), by_offset.end(), size_t{0});
    std::sort(by_offset.begin(), by_offset.end(),
              [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const auto& prev = tensors[by_offset[k - 1]];
      const auto& cur = tensors[by_offset[k]];
      if (prev.offset + prev.numel > cur.offset) {
        return wire_error{errc::invalid_argument, "fragments: tensor '" + cur.name +
                                                      "' overlaps tensor '" + prev.name +
                                                      "' in the flat parameter buffer"};
      }
    }
  }

  std::vector<int> assignment;
  switch (strategy) {
    case fragment_strategy::balanced: assignment = assign_balanced(tensors, num_fragments); break;
    case fragment_strategy::strided: assignment = assign_strided(tensors, num_fragments); break;
    case fragment_strategy::layer: {
      auto a = assign_layer(tensors, num_fragments);
      if (!a) return a.error();
      assignment = std::move(*a);
      break;
    }
    default:
      return wire_error{errc::invalid_argument, "fragments: unknown strategy value " +
                                                    std::to_string(static_cast<int>(strategy))};
  }

  fragment_plan plan;
  plan.strategy = strategy;
  plan.fragments.resize(static_cast<size_t>(num_fragments));
  plan.fragment_of_tensor = assignment;
  for (int f = 0; f < num_fragments; ++f) plan.fragments[static_cast<size_t>(f)].fragment_id = f;
  for (size_t i = 0; i < tensors.size(); ++i) {  // ascending tensor index within each fragment
    auto& frag = plan.fragments[static_cast<size_t>(assignment[i])];
    fragment_tensor ft;
    ft.tensor_index = i;
    ft.name = tensors[i].name;
    ft.fragment_offset = frag.numel;
    ft.flat_offset = tensors[i].offset;
    ft.numel = tensors[i].numel;
    ft.is_embedding = tensors[i].is_embedding;
    frag.numel += ft.numel;
    frag.tensors.push_back(std::move(ft));
    plan.total_numel += tensors[i].numel;
  }
  return plan;
}

result<fragment_plan> make_fragment_plan(const std::vector<tensor_info>& tensors, int num_fragments,
                                         std::string_view strategy) {
  auto s = parse_fragment_strategy(strategy);
  if (!s) return s.error();
  return make_fragment_plan(tensors, num_fragments, *s);
}

void gather_fragment(const fragment_layout& layout, const float* flat, float* frag) {
  for (const auto& t : layout.tensors) {
    std::memcpy(frag + t.fragment_offset, flat + t.flat_offset, t.numel * sizeof(float));
  }
}

void scatter_fragment(const fragment_layout& layout, const float* frag, float* flat) {
  for (const auto& t : layout.tensors) {
    std::memcpy(flat + t.flat_offset, frag + t.fragment_offset, t.numel * sizeof(float));
  }
}

void gather_fragment(kernels::backend& be, const fragment_layout& layout, const float* flat,
                     float* frag) {
  for (const auto& t : layout.tensors)
    be.copy(frag + t.fragment_offset, flat + t.flat_offset, t.numel);
}

void scatter_fragment(kernels::backend& be, const fragment_layout& layout, const float* frag,
                      float* flat) {
  for (const auto& t : layout.tensors)
    be.copy(flat + t.flat_offset, frag + t.fragment_offset, t.numel);
}

}  // namespace dd
