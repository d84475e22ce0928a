#include "sluice/store/memory/snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sluice/common/strings.h"
#include "sluice/common/subject.h"
#include "sluice/config/config.h"
#include "sluice/limiter/limiter.h"

namespace sluice {
inline namespace memory {
namespace {

constexpr std::string_view kMagic = "SLUICESN";
// Version 2 added each subject's alert layout (what its fired bits stand for). Version 3 keys
// subjects by subject alone (usage follows the subject from plan to plan), identifies limits by
// name and window (Limit::tag) and windows by their start, adds each layout limit's quota and the
// subject's bits fired under other quotas (MemoryStore::OtherQuota). Versions 1 and 2 are still
// read: their (plan, subject) records are merged by subject, and their tags and window ids are
// marked legacy (AlertLayout::legacy) so that the store translates them when a plan meets them.
// Version 4 adds the reservations (open, and ended ones still remembered) after the events.
constexpr uint32_t kVersion = 4;
// magic, version, payload length, payload CRC.
constexpr size_t kHeaderSize = 8 + 4 + 8 + 4;
// Sanity bounds for a file we did not write ourselves.
constexpr uint64_t kMaxCount = 1ULL << 32;
constexpr uint32_t kMaxLimits = 1024;
// The smallest encodings, to check a count against the bytes that are left before looping on it.
// Version 3: subject length, expires, counters, layout marker, other quotas; versions 1 and 2
// start with a plan tag and have no other quotas.
constexpr size_t kMinSubjectBytes = 4 + 8 + 4 + 1 + 4;
constexpr size_t kMinLegacySubjectBytes = 8 + 4 + 8 + 4;
constexpr size_t kMinCounterBytes = 8 + 4 + 2 + 2;
constexpr size_t kMinLayoutLimitBytes = 2 + 1;  // + 8 (the quota) in version 3
constexpr size_t kMinOtherQuotaBytes = 2 + 4 + 8 + 4 + 16;
// The layout marker after a subject's counters.
constexpr uint8_t kNoLayout = 0;
constexpr uint8_t kLayout = 1;
constexpr uint8_t kLegacyLayout = 2;
constexpr size_t kMinEventBytes = 8 + 3 * 4 + 4 + 8 + 8 + 3 * 8;
// id, subject, plan, estimate, expires_at, charge_on_expiry, open, ended_by, charged, holds.
constexpr size_t kMinReservationBytes = 3 * 4 + 8 + 8 + 3 + 8 + 4;
constexpr size_t kHoldBytes = 2 + 8;
// No decision sets an expiry further ahead than its window's end plus the grace period, and the
// longest window is a `year`: 366 days in a leap year, longer only by however much its zone set
// its clocks back during the year. Two days of slack cover both and any grace. Expiries are
// absolute, so a record loaded again after a restart cannot extend its life.
constexpr absl::Duration kMaxExpiryAhead = absl::Hours(24 * (366 + 2));
constexpr size_t kMaxNameBytes = 256;

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

// Little-endian writer.
class Writer {
 public:
  template <typename T>
  void Int(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) {
      out_.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
    }
  }
  void Str(std::string_view s) {
    Int<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Little-endian reader that fails (sticky) instead of reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T Int() {
    if (!Need(sizeof(T))) return T{};
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(T);
    return static_cast<T>(v);
  }
  std::string Str() {
    const uint32_t n = Int<uint32_t>();
    if (!Need(n)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  size_t left() const { return in_.size() - pos_; }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

void WriteTime(Writer& w, absl::Time t) { w.Int<int64_t>(absl::ToUnixMicros(t)); }
absl::Time ReadTime(Reader& r) { return absl::FromUnixMicros(r.Int<int64_t>()); }

std::string Encode(const MemoryStore& store, SnapshotStats& stats) {
  Writer body;
  // Subjects first, then the outbox: an alert whose flag is in the snapshot was pushed to the
  // outbox before its shard was copied, so it is in the outbox copy too (or already delivered).
  Writer subjects;
  uint64_t subject_count = 0;
  Writer reservations;
  uint64_t reservation_count = 0;
  const auto save_reservation = [&](const MemoryStore::ReservationState& r) {
    ++reservation_count;
    reservations.Str(r.id);
    reservations.Str(r.subject);
    reservations.Str(r.plan);
    reservations.Int<int64_t>(r.estimate);
    WriteTime(reservations, r.expires_at);
    reservations.Int<uint8_t>(r.charge_on_expiry ? 1 : 0);
    reservations.Int<uint8_t>(r.open ? 1 : 0);
    reservations.Int<uint8_t>(static_cast<uint8_t>(r.ended_by));
    reservations.Int<int64_t>(r.charged);
    reservations.Int<uint32_t>(static_cast<uint32_t>(r.holds.size()));
    for (const auto& [tag, amount] : r.holds) {
      reservations.Int<uint16_t>(tag);
      reservations.Int<int64_t>(amount);
    }
  };
  store.ForEach(
      [&](const MemoryStore::SubjectState& st) {
        ++subject_count;
        subjects.Str(st.subject);
        subjects.Int<int64_t>(st.expires);
        subjects.Int<uint32_t>(static_cast<uint32_t>(st.counters.size()));
        for (const MemoryStore::Counter& c : st.counters) {
          subjects.Int<int64_t>(c.used);
          subjects.Int<uint32_t>(c.window);
          subjects.Int<uint16_t>(c.tag);
          subjects.Int<uint16_t>(c.fired);
        }
        subjects.Int<uint8_t>(st.alerts == nullptr ? kNoLayout
                              : st.alerts->legacy  ? kLegacyLayout
                                                   : kLayout);
        if (st.alerts != nullptr) {
          subjects.Int<uint32_t>(static_cast<uint32_t>(st.alerts->limits.size()));
          for (const AlertLayout::LimitAlerts& l : st.alerts->limits) {
            subjects.Int<uint16_t>(l.tag);
            subjects.Int<uint8_t>(static_cast<uint8_t>(l.percents.size()));
            for (int p : l.percents) subjects.Int<uint8_t>(static_cast<uint8_t>(p));
            subjects.Int<int64_t>(l.quota);
          }
        }
        subjects.Int<uint32_t>(static_cast<uint32_t>(st.other_quotas.size()));
        for (const MemoryStore::OtherQuota& q : st.other_quotas) {
          subjects.Int<uint16_t>(q.tag);
          subjects.Int<uint32_t>(q.window);
          subjects.Int<int64_t>(q.quota);
          subjects.Int<uint32_t>(q.expires);
          subjects.Int<uint64_t>(q.percents[0]);
          subjects.Int<uint64_t>(q.percents[1]);
        }
      },
      save_reservation);
  const std::vector<Outbox::Entry> events = store.outbox().All();

  body.Int<uint64_t>(subject_count);
  body.out().append(subjects.out());
  body.Int<uint64_t>(events.size());
  for (const Outbox::Entry& e : events) {
    body.Int<uint64_t>(e.seq);
    body.Str(e.event.subject);
    body.Str(e.event.plan);
    body.Str(e.event.limit);
    body.Int<int32_t>(e.event.threshold);
    body.Int<int64_t>(e.event.used);
    body.Int<int64_t>(e.event.quota);
    WriteTime(body, e.event.window_start);
    WriteTime(body, e.event.window_end);
    WriteTime(body, e.event.occurred_at);
  }
  body.Int<uint64_t>(reservation_count);
  body.out().append(reservations.out());
  stats.subjects = subject_count;
  stats.events = events.size();
  stats.reservations = reservation_count;

  Writer file;
  file.out().append(kMagic);
  file.Int<uint32_t>(kVersion);
  file.Int<uint64_t>(body.out().size());
  file.Int<uint32_t>(Crc32(body.out()));
  file.out().append(body.out());
  stats.bytes = file.out().size();
  return std::move(file.out());
}

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(ToAbsl(what), " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteFully(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Plan and limit names as the config loader accepts them: [A-Za-z0-9_.-].
bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// A layout a PlanSet could have built: per limit, strictly ascending percentages in 1..100 and a
// quota in 1..kMaxUsed (or 0: unknown, from a version-2 file).
bool ValidLayout(const AlertLayout& layout) {
  for (const AlertLayout::LimitAlerts& l : layout.limits) {
    if (l.quota < 0 || l.quota > kMaxUsed) return false;
    int previous = 0;
    for (const int p : l.percents) {
      if (p <= previous || p > 100) return false;
      previous = p;
    }
  }
  return true;
}

// Whether a saved subject holds only values some sequence of decisions could have produced.
bool ValidSubject(const MemoryStore::SubjectState& st, const SnapshotLoadOptions& options) {
  if (!IsValidSubject(st.subject)) return false;
  if (st.expires < 0 || st.expires > std::numeric_limits<uint32_t>::max()) return false;
  if (options.now != absl::InfinitePast() &&
      absl::FromUnixSeconds(st.expires) > options.now + kMaxExpiryAhead) {
    return false;
  }
  for (const MemoryStore::Counter& c : st.counters) {
    if (!UsableCounter(c.used)) return false;
  }
  for (const MemoryStore::OtherQuota& q : st.other_quotas) {
    // Percent bits beyond 100 (bit 99 of the pair) are none a threshold could have set.
    if (q.quota < 1 || q.quota > kMaxUsed || (q.percents[1] >> 36) != 0) return false;
    if (options.now != absl::InfinitePast() &&
        absl::FromUnixSeconds(q.expires) > options.now + kMaxExpiryAhead) {
      return false;
    }
  }
  return st.alerts == nullptr || ValidLayout(*st.alerts);
}

int64_t TotalUsed(const MemoryStore::SubjectState& st) {
  int64_t total = 0;  // each counter <= kMaxUsed, at most kMaxLimits of them: no overflow
  for (const MemoryStore::Counter& c : st.counters) total += c.used;
  return total;
}

bool ValidEvent(const Outbox::Entry& e, uint64_t previous_seq) {
  const AlertEvent& ev = e.event;
  return e.seq > previous_seq && e.seq < (uint64_t{1} << 62) && IsValidSubject(ev.subject) &&
         ValidName(ev.plan) && ValidName(ev.limit) && ev.threshold >= 1 && ev.threshold <= 100 &&
         ev.quota >= 1 && ev.quota <= kMaxUsed && UsableCounter(ev.used) &&
         ev.window_start < ev.window_end && ev.window_end - ev.window_start <= kMaxExpiryAhead;
}

// The whole file, read into memory: the header's length and CRC cover all of it. NotFound when it
// does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path)) {
      return absl::NotFoundError(absl::StrCat("snapshot ", path, ": no such file"));
    }
    return ErrnoError("open snapshot", path);
  }
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// Decodes one snapshot file, in order: CheckHeader, ReadSubjects, ReadEvents, CheckEnd, then Apply.
// Each check returns DataLoss naming the file and what is wrong with it; nothing is applied to a
// store before every check has passed.
//
// Counts are checked against the bytes left before anything is reserved or looped on, so a
// crafted count cannot make the loader allocate or spin beyond the file's size; a string's length
// is checked the same way by Reader::Str before it is copied. A record cut short stops the reading
// (the reader fails, sticky) and CheckEnd reports it.
class SnapshotDecoder {
 public:
  SnapshotDecoder(const std::string& path, SnapshotLoadOptions options)
      : path_(path), options_(options) {}

  // Magic, version, payload length and CRC. REQUIRES: `data` outlives the decoder.
  absl::Status CheckHeader(std::string_view data) {
    if (data.size() < kHeaderSize) return Damaged("shorter than its header");
    if (data.substr(0, kMagic.size()) != kMagic) return Damaged("bad magic");
    Reader header(data.substr(kMagic.size(), kHeaderSize - kMagic.size()));
    version_ = header.Int<uint32_t>();
    const uint64_t length = header.Int<uint64_t>();
    const uint32_t crc = header.Int<uint32_t>();
    if (version_ < 1 || version_ > kVersion) {
      return Damaged(absl::StrCat("unsupported version ", version_));
    }
    if (length != data.size() - kHeaderSize) {
      return Damaged(absl::StrCat("payload is ", data.size() - kHeaderSize, " bytes, header says ",
                                  length, " (torn write?)"));
    }
    const std::string_view payload = data.substr(kHeaderSize);
    if (Crc32(payload) != crc) return Damaged("checksum mismatch");
    legacy_ = version_ < 3;
    bytes_ = data.size();
    r_ = Reader(payload);
    return absl::OkStatus();
  }

  // The subject records. A version-3 file has one record per subject (a repeated one replaces the
  // earlier); an older one, one per (plan, subject), and a subject counted under two plans is
  // merged by keeping the record with the larger counters (their sum: a subject is never
  // under-counted by the upgrade), or on a tie the later expiry. A record no decision could have
  // produced is dropped and counted.
  absl::Status ReadSubjects() {
    const uint64_t subject_count = r_.Int<uint64_t>();
    if (subject_count > kMaxCount ||
        subject_count > r_.left() / (legacy_ ? kMinLegacySubjectBytes : kMinSubjectBytes)) {
      return Damaged("subject count does not match the data");
    }
    // Version 1 saved no layouts: its bits are read by position, its tags and windows translated.
    if (version_ == 1) {
      auto l = std::make_shared<AlertLayout>();
      l->legacy = true;
      l->Seal();
      version_one_ = std::move(l);
    }
    for (uint64_t i = 0; i < subject_count && r_.ok(); ++i) {
      MemoryStore::SubjectState st;
      if (absl::Status s = ReadSubject(st); !s.ok()) return s;
      if (!r_.ok()) break;
      Keep(std::move(st));
    }
    return absl::OkStatus();
  }

  // The outbox's pending alert events, in sequence order; an invalid one is dropped and counted.
  absl::Status ReadEvents() {
    const uint64_t event_count = r_.Int<uint64_t>();
    if (event_count > kMaxCount || event_count > r_.left() / kMinEventBytes) {
      return Damaged("event count does not match the data");
    }
    uint64_t previous_seq = 0;
    for (uint64_t i = 0; i < event_count && r_.ok(); ++i) {
      Outbox::Entry e;
      e.seq = r_.Int<uint64_t>();
      e.event.subject = r_.Str();
      e.event.plan = r_.Str();
      e.event.limit = r_.Str();
      e.event.threshold = r_.Int<int32_t>();
      e.event.used = r_.Int<int64_t>();
      e.event.quota = r_.Int<int64_t>();
      e.event.window_start = ReadTime(r_);
      e.event.window_end = ReadTime(r_);
      e.event.occurred_at = ReadTime(r_);
      if (!r_.ok()) break;
      if (!ValidEvent(e, previous_seq)) {
        ++loaded_.dropped_events;
        continue;
      }
      previous_seq = e.seq;
      events_.push_back(std::move(e));
    }
    return absl::OkStatus();
  }

  // The reservations (version 4; none in older files). One no sequence of calls could have made
  // (a malformed id, a subject the id does not name, an amount out of range, an expiry beyond
  // the longest time to live) is dropped and counted; so is a repeated id.
  absl::Status ReadReservations() {
    if (version_ < 4) return absl::OkStatus();
    const uint64_t count = r_.Int<uint64_t>();
    if (count > kMaxCount || count > r_.left() / kMinReservationBytes) {
      return Damaged("reservation count does not match the data");
    }
    absl::flat_hash_set<std::string> ids;
    for (uint64_t i = 0; i < count && r_.ok(); ++i) {
      MemoryStore::ReservationState st;
      st.id = r_.Str();
      st.subject = r_.Str();
      st.plan = r_.Str();
      st.estimate = r_.Int<int64_t>();
      st.expires_at = ReadTime(r_);
      const uint8_t charge = r_.Int<uint8_t>();
      const uint8_t open = r_.Int<uint8_t>();
      const uint8_t ended_by = r_.Int<uint8_t>();
      st.charged = r_.Int<int64_t>();
      const uint32_t holds = r_.Int<uint32_t>();
      if (holds > kMaxLimits || holds > r_.left() / kHoldBytes) {
        return Damaged("reservation holds do not match the data");
      }
      bool valid = charge <= 1 && open <= 1 && ended_by <= 2;
      for (uint32_t k = 0; k < holds && r_.ok(); ++k) {
        const uint16_t tag = r_.Int<uint16_t>();
        const int64_t amount = r_.Int<int64_t>();
        valid = valid && amount >= 1 && amount <= kMaxUsed;
        st.holds.emplace_back(tag, amount);
      }
      if (!r_.ok()) break;
      st.charge_on_expiry = charge == 1;
      st.open = open == 1;
      st.ended_by = static_cast<ReservationEnd>(std::min<uint8_t>(ended_by, 2));
      const std::optional<ReservationRef> ref = ParseReservationId(st.id);
      valid = valid && ref.has_value() && ref->subject == st.subject && ref->plan == st.plan &&
              st.estimate >= 0 && st.estimate <= kMaxCost && st.charged >= 0 &&
              st.charged <= kMaxCost;
      if (valid && options_.now != absl::InfinitePast()) {
        valid = st.expires_at <= options_.now + kMaxReservationTtl + absl::Hours(48);
      }
      if (!valid || !ids.insert(st.id).second) {
        ++loaded_.dropped_reservations;
        continue;
      }
      reservations_.push_back(std::move(st));
    }
    return absl::OkStatus();
  }

  // Every record was whole, and the payload ends where the last one does.
  absl::Status CheckEnd() const {
    if (!r_.ok()) return Damaged("truncated record");
    if (!r_.done()) return Damaged("trailing bytes after the last record");
    return absl::OkStatus();
  }

  // Replaces `store`'s entries and outbox with what was read; `*stats` (if not null) says what.
  void Apply(MemoryStore& store, SnapshotStats* stats) {
    loaded_.subjects = subjects_.size();
    loaded_.events = events_.size();
    loaded_.reservations = reservations_.size();
    loaded_.bytes = bytes_;
    if (stats) *stats = loaded_;
    store.Restore(std::move(subjects_), std::move(reservations_));
    store.outbox().Restore(std::move(events_));
  }

 private:
  absl::Status Damaged(std::string_view why) const {
    return absl::DataLossError(absl::StrCat("snapshot ", path_, " is damaged (", ToAbsl(why),
                                            "); nothing was loaded. Move it aside to start "
                                            "without it."));
  }

  // One subject record into `st`: its counters, alert layout and (version 3) other quotas. When
  // the record is cut short the reader fails and `st` is incomplete.
  absl::Status ReadSubject(MemoryStore::SubjectState& st) {
    if (legacy_) (void)r_.Int<uint64_t>();  // the plan tag: usage now follows the subject
    st.subject = r_.Str();
    st.expires = r_.Int<int64_t>();
    const uint32_t n = r_.Int<uint32_t>();
    if (n > kMaxLimits || n > r_.left() / kMinCounterBytes) {
      return Damaged("limit count does not match the data");
    }
    for (uint32_t k = 0; k < n && r_.ok(); ++k) {
      MemoryStore::Counter c;
      c.used = r_.Int<int64_t>();
      c.window = r_.Int<uint32_t>();
      c.tag = r_.Int<uint16_t>();
      c.fired = r_.Int<uint16_t>();
      st.counters.push_back(c);
    }
    const uint8_t marker = version_ >= 2 ? r_.Int<uint8_t>() : kNoLayout;
    if (marker > kLegacyLayout || (legacy_ && marker > kLayout)) {
      return Damaged("unknown alert layout marker");
    }
    if (marker != kNoLayout) {
      if (absl::Status s = ReadLayout(marker, st); !s.ok()) return s;
    } else if (version_ == 1) {
      st.alerts = version_one_;
    }
    if (!legacy_) {
      const uint32_t others = r_.Int<uint32_t>();
      if (others > kMaxLimits * 100 || others > r_.left() / kMinOtherQuotaBytes) {
        return Damaged("other quotas do not match the data");
      }
      for (uint32_t k = 0; k < others && r_.ok(); ++k) {
        MemoryStore::OtherQuota& q = st.other_quotas.emplace_back();
        q.tag = r_.Int<uint16_t>();
        q.window = r_.Int<uint32_t>();
        q.quota = r_.Int<int64_t>();
        q.expires = r_.Int<uint32_t>();
        q.percents[0] = r_.Int<uint64_t>();
        q.percents[1] = r_.Int<uint64_t>();
      }
    }
    return absl::OkStatus();
  }

  // A subject's alert layout (what its fired bits stand for), after a `marker` that says it has
  // one.
  absl::Status ReadLayout(uint8_t marker, MemoryStore::SubjectState& st) {
    auto alerts = std::make_shared<AlertLayout>();
    alerts->legacy = legacy_ || marker == kLegacyLayout;
    const uint32_t limits = r_.Int<uint32_t>();
    if (limits > kMaxLimits || limits > r_.left() / (kMinLayoutLimitBytes + (legacy_ ? 0 : 8))) {
      return Damaged("alert layout does not match the data");
    }
    for (uint32_t k = 0; k < limits && r_.ok(); ++k) {
      AlertLayout::LimitAlerts& l = alerts->limits.emplace_back();
      l.tag = r_.Int<uint16_t>();
      const uint8_t count = r_.Int<uint8_t>();
      if (count > kMaxThresholds) return Damaged("implausible alert layout");
      for (uint8_t t = 0; t < count && r_.ok(); ++t) l.percents.push_back(r_.Int<uint8_t>());
      if (!legacy_) l.quota = r_.Int<int64_t>();
    }
    alerts->Seal();
    // Subjects of one plan share one layout: equal ones are kept once.
    st.alerts = layouts_.try_emplace(alerts->id, std::move(alerts)).first->second;
    return absl::OkStatus();
  }

  // A whole record: kept unless invalid; merged with an earlier record of the same subject.
  void Keep(MemoryStore::SubjectState st) {
    if (!ValidSubject(st, options_)) {
      ++loaded_.dropped_subjects;
      return;
    }
    auto [at, fresh] = seen_.try_emplace(st.subject, subjects_.size());
    if (!fresh) {
      ++loaded_.dropped_subjects;
      MemoryStore::SubjectState& kept = subjects_[at->second];
      const int64_t mine = TotalUsed(st), theirs = TotalUsed(kept);
      if (!legacy_ || mine > theirs || (mine == theirs && st.expires > kept.expires)) {
        kept = std::move(st);
      }
      return;
    }
    subjects_.push_back(std::move(st));
  }

  const std::string& path_;
  const SnapshotLoadOptions options_;
  uint32_t version_ = 0;
  bool legacy_ = false;                             // versions 1 and 2
  size_t bytes_ = 0;                                // the whole file's
  Reader r_{std::string_view()};                    // the payload, once the header is checked
  std::shared_ptr<const AlertLayout> version_one_;  // every version-1 subject's layout
  absl::flat_hash_map<uint32_t, std::shared_ptr<const AlertLayout>> layouts_;  // by id
  std::vector<MemoryStore::SubjectState> subjects_;
  absl::flat_hash_map<std::string, size_t> seen_;  // subject -> index in subjects_
  std::vector<Outbox::Entry> events_;
  std::vector<MemoryStore::ReservationState> reservations_;
  SnapshotStats loaded_;
};

}  // namespace

uint32_t Crc32(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

absl::Status SaveSnapshot(const MemoryStore& store, const std::string& path, SnapshotStats* stats) {
  SnapshotStats local;
  const std::string data = Encode(store, local);
  const std::filesystem::path target(path);
  const std::string dir =
      target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create", tmp);
  absl::Status s = WriteFully(fd, data, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("fsync", tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("close", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError("rename to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  if (stats) *stats = local;
  return absl::OkStatus();
}

absl::Status LoadSnapshot(const std::string& path, MemoryStore& store, SnapshotStats* stats,
                          SnapshotLoadOptions options) {
  absl::StatusOr<std::string> data = ReadWholeFile(path);
  if (!data.ok()) return data.status();
  SnapshotDecoder decoder(path, options);
  if (absl::Status s = decoder.CheckHeader(*data); !s.ok()) return s;
  if (absl::Status s = decoder.ReadSubjects(); !s.ok()) return s;
  if (absl::Status s = decoder.ReadEvents(); !s.ok()) return s;
  if (absl::Status s = decoder.ReadReservations(); !s.ok()) return s;
  if (absl::Status s = decoder.CheckEnd(); !s.ok()) return s;
  decoder.Apply(store, stats);
  return absl::OkStatus();
}

}  // namespace memory
}  // namespace sluice
