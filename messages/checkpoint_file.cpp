// messages/checkpoint_file.cpp — see checkpoint_file.hpp.
#include "messages/checkpoint_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "messages/detail/envelope.hpp"
#include "util/assert.hpp"
#include "util/endian.hpp"
#include "util/files.hpp"

namespace dd {

using namespace detail;

namespace {

constexpr char checkpoint_magic[8] = {'D', 'D', 'O', 'W', 'N', 'C', 'K', '1'};
constexpr size_t checkpoint_header_bytes = 24;

void put_u32(uint8_t* p, uint32_t v) { util::store_le(p, v); }
void put_u64(uint8_t* p, uint64_t v) { util::store_le(p, v); }
uint32_t get_u32(const uint8_t* p) { return util::load_le<uint32_t>(p); }
uint64_t get_u64(const uint8_t* p) { return util::load_le<uint64_t>(p); }

uint32_t crc32_of(const uint8_t* data, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (size > 0) {
    uInt n = static_cast<uInt>(std::min<size_t>(size, size_t{1} << 30));
    crc = ::crc32(crc, data, n);
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::vector<uint8_t> encode_checkpoint(const owner_checkpoint& c) {
  DD_ASSERT(c.momentum.size() == c.value.size(), "momentum and value differ in length");
  size_t bytes = (c.value.size() + c.momentum.size()) * sizeof(float);
  for (const auto& a : c.anchors) {
    DD_ASSERT(a.value.size() == c.value.size(), "an anchor differs in length from the value");
    bytes += a.value.size() * sizeof(float);
  }
  capnp::MallocMessageBuilder b(first_segment_words(bytes + 64 * c.anchors.size()));
  auto r = b.initRoot<cw::OwnerCheckpoint>();
  r.setFragmentId(c.fragment_id);
  r.setVersion(c.version);
  r.setValue(float_bytes(c.value));
  r.setMomentum(float_bytes(c.momentum));
  r.setXiStepSeconds(c.xi_step_s);
  r.setXiQuorumSeconds(c.xi_quorum_s);
  r.setXiSyncSeconds(c.xi_sync_s);
  auto anchors = r.initAnchors(static_cast<unsigned>(c.anchors.size()));
  for (size_t i = 0; i < c.anchors.size(); ++i) {
    anchors[static_cast<unsigned>(i)].setVersion(c.anchors[i].version);
    anchors[static_cast<unsigned>(i)].setValue(float_bytes(c.anchors[i].value));
  }
  set_merged(r.initMerged(static_cast<unsigned>(c.merged.size())), c.merged);
  r.setRunId(c.run_id);
  r.setExperimentDigest(c.experiment_digest);
  r.setMergeRecord(c.merge_record);
  wire_bytes body = flatten(b);
  std::vector<uint8_t> out(checkpoint_header_bytes + body.size());
  std::memcpy(out.data(), checkpoint_magic, sizeof(checkpoint_magic));
  put_u32(out.data() + 8, checkpoint_format_version);
  put_u32(out.data() + 12, crc32_of(body.data(), body.size()));
  put_u64(out.data() + 16, body.size());
  std::memcpy(out.data() + checkpoint_header_bytes, body.data(), body.size());
  return out;
}

result<owner_checkpoint> decode_checkpoint(const uint8_t* data, size_t size) {
  using R = result<owner_checkpoint>;
  if (data == nullptr || size < checkpoint_header_bytes) {
    return R(errc::corrupt, "checkpoint of " + num(size) + " bytes is shorter than its " +
                                num(checkpoint_header_bytes) + "-byte header");
  }
  if (std::memcmp(data, checkpoint_magic, sizeof(checkpoint_magic)) != 0) {
    return R(errc::corrupt, "checkpoint magic is not DDOWNCK1");
  }
  const uint32_t version = get_u32(data + 8);
  if (version != checkpoint_format_version) {
    return R(errc::corrupt, "checkpoint format version " + num(version) +
                                " is not supported (this build reads " +
                                num(checkpoint_format_version) + ")");
  }
  const uint32_t crc = get_u32(data + 12);
  const uint64_t body_len = get_u64(data + 16);
  if (body_len != size - checkpoint_header_bytes) {
    return R(errc::corrupt, "checkpoint body length " + num(body_len) + " does not match the " +
                                num(size - checkpoint_header_bytes) + " bytes present");
  }
  const uint8_t* body = data + checkpoint_header_bytes;
  if (crc32_of(body, static_cast<size_t>(body_len)) != crc) {
    return R(errc::corrupt, "checkpoint CRC32 mismatch: the file is damaged");
  }
  return with_reader(
      body, static_cast<size_t>(body_len), 16, [](capnp::MessageReader& reader) -> R {
        auto r = reader.getRoot<cw::OwnerCheckpoint>();
        owner_checkpoint c;
        c.fragment_id = r.getFragmentId();
        c.version = r.getVersion();
        auto value = to_floats(r.getValue());
        auto momentum = to_floats(r.getMomentum());
        if (!value) return R(errc::malformed, "checkpoint.value is not a float32 array");
        if (!momentum) return R(errc::malformed, "checkpoint.momentum is not a float32 array");
        if (momentum->size() != value->size()) {
          return R(errc::malformed, "checkpoint.momentum has " + num(momentum->size()) +
                                        " elements, value has " + num(value->size()));
        }
        c.value = std::move(*value);
        c.momentum = std::move(*momentum);
        c.xi_step_s = r.getXiStepSeconds();
        c.xi_quorum_s = r.getXiQuorumSeconds();
        c.xi_sync_s = r.getXiSyncSeconds();
        auto anchors = r.getAnchors();
        for (unsigned i = 0; i < anchors.size(); ++i) {
          auto v = to_floats(anchors[i].getValue());
          if (!v || v->size() != c.value.size()) {
            return R(errc::malformed, "checkpoint.anchors[" + num(i) + "].value does not hold " +
                                          num(c.value.size()) + " float32 elements");
          }
          c.anchors.push_back(anchor_entry{anchors[i].getVersion(), std::move(*v)});
        }
        c.merged = get_merged(r.getMerged());
        c.run_id = r.getRunId();
        c.experiment_digest = r.getExperimentDigest();
        c.merge_record = r.getMergeRecord();
        return c;
      });
}

status write_file_atomic(const std::string& path, const uint8_t* data, size_t size) {
  auto st =
      util::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(data), size));
  if (!st) return {errc::io, st.message};
  return {};
}

result<std::vector<uint8_t>> read_file(const std::string& path, size_t max_bytes) {
  using R = result<std::vector<uint8_t>>;
  std::string bytes;
  auto st = util::read_file(path, bytes, max_bytes);
  if (!st) return R(st.error == EFBIG ? errc::too_large : errc::io, st.message);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

status save_checkpoint(const std::string& path, const owner_checkpoint& c) {
  std::vector<uint8_t> bytes = encode_checkpoint(c);
  return write_file_atomic(path, bytes.data(), bytes.size());
}

result<owner_checkpoint> load_checkpoint(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  auto c = decode_checkpoint(bytes->data(), bytes->size());
  if (!c) return wire_error{c.code(), path + ": " + c.error().message};
  return c;
}

}  // namespace dd
