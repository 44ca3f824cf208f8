// runtime/checkpoint.cpp — see checkpoint.hpp.
#include "runtime/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/adamw.hpp"
#include "runtime/model.hpp"
#include "util/crc32c.hpp"
#include "util/endian.hpp"
#include "util/files.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint.cpp writes float bytes as-is; safetensors is little-endian");

namespace dd {

const st_tensor* st_file::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

size_t numel_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::string crc_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

}  // namespace

void write_safetensors(const std::string& path, const st_file& file) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    if (!names.insert(t.name).second || t.name == "__metadata__")
      throw std::invalid_argument(
          fmt::format("checkpoint '{}': duplicate or reserved tensor name '{}'", path, t.name));
    if (numel_of(t.shape) != t.data.size())
      throw std::invalid_argument(
          fmt::format("checkpoint '{}': tensor '{}' has {} values but shape {}", path, t.name,
                      t.data.size(), shape_str(t.shape)));
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // The data section's checksum, checked on load (a file of another tool has none).
  uint32_t crc = 0;
  for (const auto& t : file.tensors)
    crc = util::crc32c(t.data.data(), t.data.size() * sizeof(float), crc);
  auto metadata = file.metadata;
  metadata[st_checksum_key] = crc_hex(crc);
  header["__metadata__"] = metadata;
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));

  std::vector<std::string_view> pieces;
  pieces.emplace_back(reinterpret_cast<const char*>(len), sizeof len);
  pieces.emplace_back(h);
  for (const auto& t : file.tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()),
                        t.data.size() * sizeof(float));
  if (auto st = util::write_file_atomic(path, pieces); !st)
    throw std::runtime_error(fmt::format("checkpoint '{}': {}", path, st.message));
}

st_file read_safetensors(const std::string& path, const st_read_options& options) {
  std::string bytes;
  if (auto st = util::read_file(path, bytes); !st)
    throw std::runtime_error(fmt::format("checkpoint '{}': {}", path, st.message));
  return parse_safetensors(bytes, path, options);
}

st_file parse_safetensors(std::string_view bytes, const std::string& path,
                          const st_read_options& options) {
  auto fail = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error(fmt::format("checkpoint '{}': {}", path, what));
  };
  if (bytes.size() < 8)
    throw fail(
        fmt::format("file is {} bytes, shorter than the 8-byte header length", bytes.size()));
  // A safetensors header is a JSON object right after its 8-byte length: anything else (a JSON
  // or text file given by mistake) is named as not being safetensors at all.
  if (bytes.size() > 8 && bytes[8] != '{')
    throw fail(
        "not a safetensors file (it starts with an 8-byte header length and a JSON object; "
        "byte 8 of this file is not '{')");
  const uint64_t hlen = util::load_le<uint64_t>(reinterpret_cast<const uint8_t*>(bytes.data()));
  if (hlen > bytes.size() - 8)
    throw fail(fmt::format("header length {} exceeds the file size {} (truncated file?)", hlen,
                           bytes.size()));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8,
                                   bytes.begin() + 8 + static_cast<std::ptrdiff_t>(hlen));
  } catch (const nlohmann::json::exception& e) {
    throw fail(fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - hlen;
  const char* data = bytes.data() + 8 + hlen;
  st_file out;
  struct span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("field '__metadata__' is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw fail(fmt::format("metadata '{}' is not a string", m.key()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw fail(fmt::format("tensor '{}': entry is not an object", name));
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string())
      throw fail(fmt::format("tensor '{}': missing field 'dtype'", name));
    if (dt->get<std::string>() != "F32")
      throw fail(fmt::format("tensor '{}': dtype '{}' is not supported (only F32)", name,
                             dt->get<std::string>()));
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array())
      throw fail(fmt::format("tensor '{}': missing or malformed field 'shape'", name));
    st_tensor t;
    t.name = name;
    for (const auto& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw fail(fmt::format(
            "tensor '{}': field 'shape' holds a non-integer or negative dimension", name));
      t.shape.push_back(d.get<int64_t>());
    }
    // numel * sizeof(float) must fit the data section (so it never overflows); the old bound
    // `numel > data_size / d + 1` let a shape of 2^62 wrap its byte size to 0 and then asked
    // for 2^62 floats (regression input tests/fuzz/corpus/safetensors_fuzz/regress_shape_wraps).
    // A zero dimension makes any shape empty.
    uint64_t numel = 1;
    if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) {
      numel = 0;
    } else {
      for (const auto d : t.shape) {
        const auto du = static_cast<uint64_t>(d);
        if (numel > data_size / sizeof(float) / du)
          throw fail(fmt::format("tensor '{}': shape {} is too large for the {}-byte data section",
                                 name, shape_str(t.shape), data_size));
        numel *= du;
      }
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      throw fail(
          fmt::format("tensor '{}': field 'data_offsets' must be two non-negative integers", name));
    const auto b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    if (b > e || e > data_size)
      throw fail(
          fmt::format("tensor '{}': data_offsets [{}, {}] out of range (data section is {} bytes)",
                      name, b, e, data_size));
    if (e - b != numel * sizeof(float))
      throw fail(fmt::format("tensor '{}': data_offsets span {} bytes but shape {} needs {}", name,
                             e - b, shape_str(t.shape), numel * sizeof(float)));
    t.data.resize(numel);
    if (numel > 0) std::memcpy(t.data.data(), data + b, numel * sizeof(float));
    spans.push_back({b, e, name});
    out.tensors.push_back(std::move(t));
  }
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t c) { return spans[a].begin < spans[c].begin; });
  uint64_t pos = 0;
  for (size_t i : order) {
    if (spans[i].begin < pos)
      throw fail(fmt::format("tensor '{}': data_offsets overlap another tensor", spans[i].name));
    if (spans[i].begin > pos)
      throw fail(fmt::format("tensor '{}': gap before its data_offsets", spans[i].name));
    pos = spans[i].end;
  }
  if (pos != data_size)
    throw fail(fmt::format("data section is {} bytes but tensors cover {}", data_size, pos));
  // The checksum last: the structural checks above name what is wrong more precisely.
  const auto md = header.find("__metadata__");
  const nlohmann::json* sum = nullptr;
  if (md != header.end() && md->is_object()) {
    auto it = md->find(st_checksum_key);
    if (it != md->end()) sum = &*it;
  }
  if (sum != nullptr) {
    const std::string want = sum->is_string() ? sum->get<std::string>() : sum->dump();
    const std::string got = crc_hex(util::crc32c(data, data_size));
    if (want != got)
      throw fail(
          fmt::format("data section CRC32C {} does not match {} = {} in its metadata: the "
                      "file is damaged",
                      got, st_checksum_key, want));
  } else if (options.require_checksum) {
    throw fail(
        fmt::format("carries no '{}' checksum in its metadata (a file written by another "
                    "tool?) and a checksum is required",
                    st_checksum_key));
  }

  std::vector<st_tensor> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(std::move(out.tensors[i]));
  out.tensors = std::move(sorted);
  return out;
}

void save_checkpoint(const std::string& path, const model& model, const adamw* opt,
                     const std::map<std::string, std::string>& metadata) {
  st_file f;
  f.metadata = metadata;
  const model_config cfg = model.config();
  f.metadata["format"] = fmt::format("dd-{}-1", cfg.kind);
  f.metadata["config"] = cfg.to_json().dump();
  const auto params = model.get_parameters();
  std::vector<float> m, v;
  if (opt != nullptr) {
    m.resize(opt->size());
    v.resize(opt->size());
    model.backend().download(m.data(), opt->m(), m.size());
    model.backend().download(v.data(), opt->v(), v.size());
    f.metadata["adamw_steps"] = std::to_string(opt->steps());
  }
  auto add = [&](const std::string& prefix, const std::vector<float>& src) {
    for (const auto& t : model.tensors())
      f.tensors.push_back(
          {prefix + t.name, t.shape,
           std::vector<float>(src.begin() + static_cast<std::ptrdiff_t>(t.offset),
                              src.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel))});
  };
  add("", params);
  if (opt != nullptr) {
    add("adamw.m.", m);
    add("adamw.v.", v);
  }
  write_safetensors(path, f);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, model& model,
                                                   adamw* opt, const st_read_options& options) {
  const st_file f = read_safetensors(path, options);
  auto fail = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error(fmt::format("checkpoint '{}': {}", path, what));
  };
  const size_t n = model.num_params();
  auto gather = [&](const std::string& prefix) {
    std::vector<float> host(n);
    for (const auto& t : model.tensors()) {
      const st_tensor* s = f.find(prefix + t.name);
      if (s == nullptr) throw fail(fmt::format("tensor '{}' is missing", prefix + t.name));
      if (s->shape != t.shape)
        throw fail(fmt::format("tensor '{}' has shape {} but the model expects {}", prefix + t.name,
                               shape_str(s->shape), shape_str(t.shape)));
      std::copy(s->data.begin(), s->data.end(),
                host.begin() + static_cast<std::ptrdiff_t>(t.offset));
    }
    return host;
  };
  const auto params = gather("");
  std::vector<float> m, v;
  int64_t steps = 0;
  if (opt != nullptr) {
    m = gather("adamw.m.");
    v = gather("adamw.v.");
    auto it = f.metadata.find("adamw_steps");
    if (it == f.metadata.end()) throw fail("metadata 'adamw_steps' is missing");
    try {
      steps = std::stoll(it->second);
    } catch (const std::exception&) {
      throw fail(fmt::format("metadata 'adamw_steps' is not an integer: '{}'", it->second));
    }
  }
  model.set_parameters(params);
  if (opt != nullptr) {
    model.backend().upload(opt->m(), m.data(), n);
    model.backend().upload(opt->v(), v.data(), n);
    opt->set_steps(steps);
  }
  return f.metadata;
}

}  // namespace dd
