// libFuzzer target for the RESP reply reader (hiredis redisReader behind
// sluice::redis::ReplyReader).
//
// The input is a reply byte stream, fed in two chunks the way a connection's reads would deliver
// it: the first input byte picks the split point (modulo the length of the rest). After each chunk,
// Next() is drained until it needs more bytes or reports an error; after an error the reader must
// stay in error. Invariants: no crash, every reply's nesting depth is bounded (hiredis allows at
// most 7 nested arrays below the top), buffered_bytes() never exceeds the configured cap, and a
// small cap makes oversized input an error rather than an allocation.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "sluice/store/redis/resp.h"

namespace {

constexpr size_t kMaxDepth = 9;
constexpr size_t kMaxBuffered = size_t{1} << 16;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "resp_reader_fuzzer: invariant broken: %s\n", what);
    __builtin_trap();
  }
}

size_t Depth(const sluice::redis::Reply& reply) {
  size_t deepest = 0;
  for (const auto& element : reply.elements) {
    const size_t d = Depth(element);
    if (d > deepest) deepest = d;
  }
  return deepest + 1;
}

// Returns false once the reader has reported an error.
bool Drain(sluice::redis::ReplyReader& reader) {
  while (true) {
    auto next = reader.Next();
    if (!next.ok()) {
      Check(!reader.Next().ok(), "error is not sticky");
      return false;
    }
    if (!next->has_value()) return true;
    const auto& reply = **next;
    Check(Depth(reply) <= kMaxDepth, "reply nested too deep");
    Check(reply.is_array() || reply.elements.empty(), "non-array reply with elements");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = rest.empty() ? 0 : data[0] % (rest.size() + 1);

  sluice::redis::ReplyReader reader(kMaxBuffered);
  reader.Feed(rest.substr(0, split));
  Check(reader.buffered_bytes() <= kMaxBuffered, "buffered bytes over the cap");
  if (Drain(reader)) {
    reader.Feed(rest.substr(split));
    Check(reader.buffered_bytes() <= kMaxBuffered, "buffered bytes over the cap");
    Drain(reader);
  }
  return 0;
}
