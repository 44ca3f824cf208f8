// tools/chaos/targets.cpp — see targets.hpp.
#include "tools/chaos/targets.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tools/chaos/common.hpp"
#include "tools/chaos/schedule.hpp"

namespace dd::chaos {

std::vector<target_item> parse_targets(const std::string& spec) {
  if (spec.empty()) throw usage_error("no target given (e.g. learner:2, node:syncer, learners)");
  std::vector<target_item> out;
  for (const auto& text : split(spec, ',')) {
    target_item it;
    it.text = text;
    if (text == "learners") {
      it.k = target_item::kind::learners;
    } else if (text == "nodes") {
      it.k = target_item::kind::nodes;
    } else if (text.rfind("node:", 0) == 0 && text.size() > 5) {
      it.k = target_item::kind::node;
      it.name = text.substr(5);
    } else if (text.rfind("learner:", 0) == 0 || text.rfind("owner:", 0) == 0) {
      const auto num = text.substr(text.find(':') + 1);
      if (num.empty() || !std::all_of(num.begin(), num.end(), ::isdigit))
        throw usage_error(
            fmt::format("target '{}': the id must be a number, e.g. learner:2", text));
      it.k = target_item::kind::actor;
      it.name = text.substr(0, text.find(':') + 1) + std::to_string(std::stoi(num));
    } else {
      throw usage_error(fmt::format(
          "target '{}': expected learner:N, owner:N, node:NAME, learners or nodes", text));
    }
    out.push_back(it);
  }
  return out;
}

pick_mode parse_pick(const std::string& t) {
  if (t == "one") return pick_mode::one;
  if (t == "minority") return pick_mode::minority;
  if (t == "majority") return pick_mode::majority;
  if (t == "all") return pick_mode::all;
  throw usage_error(fmt::format("--pick: '{}' must be one, minority, majority or all", t));
}

const char* to_string(pick_mode m) {
  switch (m) {
    case pick_mode::one: return "one";
    case pick_mode::minority: return "minority";
    case pick_mode::majority: return "majority";
    case pick_mode::all: return "all";
  }
  return "?";
}

size_t pick_count(pick_mode m, size_t n) {
  switch (m) {
    case pick_mode::one: return std::min<size_t>(1, n);
    case pick_mode::minority: return n == 0 ? 0 : (n - 1) / 2;
    case pick_mode::majority: return std::min(n, n / 2 + 1);
    case pick_mode::all: return n;
  }
  return 0;
}

namespace {

std::string known_actors(const nodes_file& f, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& n : f.nodes)
    for (const auto& a : n.actors)
      if (a.rfind(prefix, 0) == 0) names.push_back(a);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

std::string known_nodes(const nodes_file& f) {
  std::vector<std::string> names;
  for (const auto& n : f.nodes) names.push_back(n.name);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

// Node names one item resolves to; throws for names nobody hosts.
std::vector<std::string> nodes_of(const nodes_file& f, const target_item& it) {
  std::vector<std::string> out;
  switch (it.k) {
    case target_item::kind::actor:
      for (const auto& n : f.nodes)
        if (n.hosts(it.name)) out.push_back(n.name);
      if (out.empty()) {
        const auto prefix = it.name.substr(0, it.name.find(':') + 1);
        throw chaos_error(fmt::format("target {}: no node in {} hosts it (known: {})", it.text,
                                      f.path, known_actors(f, prefix)));
      }
      break;
    case target_item::kind::node:
      if (!f.find(it.name))
        throw chaos_error(fmt::format("target {}: no node named '{}' in {} (known: {})", it.text,
                                      it.name, f.path, known_nodes(f)));
      out.push_back(it.name);
      break;
    case target_item::kind::learners:
      for (const auto& n : f.nodes)
        if (n.role == "learner") out.push_back(n.name);
      break;
    case target_item::kind::nodes:
      for (const auto& n : f.nodes) out.push_back(n.name);
      break;
  }
  return out;
}

}  // namespace

selection resolve_targets(const nodes_file& f, const std::vector<target_item>& items,
                          const target_options& opt) {
  std::set<std::string> protected_nodes;
  for (const auto& spec : opt.protect)
    for (const auto& it : parse_targets(spec))
      for (const auto& n : nodes_of(f, it)) protected_nodes.insert(n);

  selection sel;
  std::vector<target_hit> candidates;  // nodes-file order below
  bool any_group = false;
  auto add = [&](const std::string& node, const std::string& why) {
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const target_hit& h) { return h.node == node; });
    if (it == candidates.end()) {
      candidates.push_back({node, {}, {}});
      it = candidates.end() - 1;
    }
    if (!why.empty() && std::find(it->named.begin(), it->named.end(), why) == it->named.end())
      it->named.push_back(why);
  };
  std::set<std::string> named_explicitly;
  for (const auto& it : items) {
    const auto hit_nodes = nodes_of(f, it);
    if (!it.is_group()) {
      for (const auto& n : hit_nodes) {
        if (protected_nodes.count(n))
          throw chaos_error(
              fmt::format("target {}: node {} is protected (--protect); refusing", it.text, n));
        named_explicitly.insert(n);
        add(n, it.text);
      }
      continue;
    }
    any_group = true;
    for (const auto& n : hit_nodes) {
      if (protected_nodes.count(n)) {
        sel.notes.push_back(fmt::format("node {} is protected (--protect), not picked", n));
        continue;
      }
      if (f.find(n)->role == "syncer" && !named_explicitly.count(n)) {
        sel.notes.push_back(fmt::format(
            "node {} is protected by default (name it, e.g. node:{}, to fault it)", n, n));
        continue;
      }
      add(n, "");
    }
  }
  // A group item seen before a named item for the same syncer: keep the named one only.
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                  [&](const target_hit& h) {
                                    return f.find(h.node)->role == "syncer" && h.named.empty() &&
                                           !named_explicitly.count(h.node);
                                  }),
                   candidates.end());
  std::sort(candidates.begin(), candidates.end(), [&](const target_hit& a, const target_hit& b) {
    auto pos = [&](const std::string& n) {
      for (size_t i = 0; i < f.nodes.size(); ++i)
        if (f.nodes[i].name == n) return i;
      return f.nodes.size();
    };
    return pos(a.node) < pos(b.node);
  });

  const pick_mode mode = opt.pick_given ? opt.pick : (any_group ? pick_mode::one : pick_mode::all);
  const size_t k = pick_count(mode, candidates.size());
  if (candidates.empty())
    throw chaos_error("no target left to fault (every candidate is protected or none exists)");
  if (k == 0)
    throw chaos_error(
        fmt::format("pick {} of {} candidates is empty", to_string(mode), candidates.size()));
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (k < candidates.size()) {
    chaos_rng rng(opt.seed);
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    order.resize(k);
    std::sort(order.begin(), order.end());
  }
  for (size_t i : order) {
    target_hit h = candidates[i];
    const node_entry* n = f.find(h.node);
    for (const auto& a : n->actors)
      if (std::find(h.named.begin(), h.named.end(), a) == h.named.end()) h.others.push_back(a);
    const bool via_actor = std::any_of(h.named.begin(), h.named.end(), [](const std::string& s) {
      return s.rfind("node:", 0) != 0;
    });
    if (opt.exact && via_actor && n->actors.size() > 1)
      throw chaos_error(fmt::format(
          "--exact: {} is hosted by node {} together with {}; a process fault would hit them all",
          fmt::join(h.named, ","), h.node, fmt::join(h.others, ", ")));
    sel.hits.push_back(std::move(h));
  }
  return sel;
}

}  // namespace dd::chaos
