// A protobuf wire-format writer (varints, length-delimited fields, nested messages), for the one
// message the service writes on every call without building it first (AppendAdmissionWire,
// mapping.h). Writes what protobuf's own serialization writes for proto3 fields: a field at its
// default (0, empty) is left out, a nested message is written even when empty.
#ifndef SLUICE_RLS_WIRE_H_
#define SLUICE_RLS_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::rls {

class WireWriter {
 public:
  explicit WireWriter(std::string* out) : out_(out) {}

  // An integer, enum or bool field (wire type 0); a negative int32/int64 as its 64-bit two's
  // complement, as protobuf writes it.
  void Varint(int field, uint64_t value) {
    if (value == 0) return;
    Raw(static_cast<uint64_t>(field) << 3);
    Raw(value);
  }
  // A string or bytes field (wire type 2).
  void Bytes(int field, std::string_view value) {
    if (value.empty()) return;
    Raw(static_cast<uint64_t>(field) << 3 | 2);
    Raw(value.size());
    out_->append(value);
  }
  // A message field: `body` writes its fields. The length goes in front once it is known.
  template <class Body>
  void Message(int field, Body&& body) {
    Raw(static_cast<uint64_t>(field) << 3 | 2);
    const size_t at = out_->size();
    out_->push_back('\0');
    body();
    const size_t length = out_->size() - at - 1;
    if (length < 0x80) {
      (*out_)[at] = static_cast<char>(length);
      return;
    }
    char prefix[10];
    size_t n = 0;
    for (uint64_t v = length; v >= 0x80; v >>= 7) prefix[n++] = static_cast<char>(v | 0x80);
    prefix[n] = static_cast<char>(length >> (7 * n));
    out_->replace(at, 1, prefix, n + 1);
  }

 private:
  void Raw(uint64_t v) {
    while (v >= 0x80) {
      out_->push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_->push_back(static_cast<char>(v));
  }

  std::string* out_;
};

}  // namespace sluice::rls

#endif  // SLUICE_RLS_WIRE_H_
