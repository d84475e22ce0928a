// Compiles envoyproxy/ratelimit's trees into RlRuleSet and names the counters (ratelimit_rules.h).
#include "sluice/rls/ratelimit_rules.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "sluice/common/digest.h"
#include "sluice/common/hex.h"
#include "sluice/common/stable_hash.h"
#include "sluice/common/strings.h"
#include "sluice/common/subject.h"

namespace sluice::rls {
namespace {

using config::RlUnit;

// Characters a counter key keeps as they are; '/' and '=' delimit its parts, '%' escapes.
bool IsPlain(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
         c == '@' || c == '+' || c == '-';
}

void AppendEscaped(std::string& out, std::string_view part) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char c : part) {
    if (IsPlain(c)) {
      out.push_back(c);
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    }
  }
}

// 32 hex digits: the first 128 bits of SHA-256 (or, should OpenSSL fail for want of memory, two
// stable 64-bit hashes: still deterministic, no longer cryptographic).
std::string Digest128(std::string_view text) {
  if (const std::optional<Sha256Digest> digest = Sha256(text)) {
    return EncodeHex(std::span<const uint8_t>(digest->data(), 16));
  }
  return absl::StrCat(absl::Hex(StableHash64(text), absl::kZeroPad16),
                      absl::Hex(StableHash64(text, 0x9e3779b97f4a7c15ULL), absl::kZeroPad16));
}

// "rl:" + the readable start of `text` (subject characters but '=' and ':', others as '_') + ":"
// + the digest: at most kMaxSubjectLength bytes, no '='.
std::string Hashed(std::string_view text) {
  constexpr size_t kDigest = 32;
  const size_t room = kMaxSubjectLength - 3 - 1 - kDigest;
  std::string out = "rl:";
  for (size_t i = 0; i < text.size() && i < room; ++i) {
    const char c = text[i];
    out.push_back(IsSubjectByte(c) && c != '=' && c != ':' ? c : '_');
  }
  absl::StrAppend(&out, ":", Digest128(text));
  return out;
}

absl::Status Refuse(std::string_view source, std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(source), ": ", ToAbsl(path), ": ", ToAbsl(what)));
}

Plan OneLimitPlan(std::string name, uint32_t quota, RlUnit unit, const config::WindowSpec& window) {
  Plan plan;
  plan.name = std::move(name);
  plan.tz = absl::UTCTimeZone();
  plan.tag = StableHash64(plan.name);
  Limit limit;
  limit.name = RlLimitName(unit);
  limit.quota = quota;
  limit.window = window;
  limit.tag = LimitTag(limit.name, limit.window, plan.tz);
  plan.limits.push_back(std::move(limit));
  plan.SealAlerts();
  return plan;
}

// A metadata value of the files as protobuf's Value (what envoyproxy/ratelimit sends).
void ToProto(const config::RlMetadataValue& in, google::protobuf::Value* out) {
  using Kind = config::RlMetadataValue::Kind;
  switch (in.kind) {
    case Kind::kNull:
      out->set_null_value(google::protobuf::NULL_VALUE);
      return;
    case Kind::kBool:
      out->set_bool_value(in.boolean);
      return;
    case Kind::kNumber:
      out->set_number_value(in.number);
      return;
    case Kind::kString:
      out->set_string_value(in.string);
      return;
    case Kind::kList: {
      google::protobuf::ListValue* list = out->mutable_list_value();
      for (const config::RlMetadataValue& item : in.list) ToProto(item, list->add_values());
      return;
    }
    case Kind::kMap: {
      google::protobuf::Struct* fields = out->mutable_struct_value();
      for (const config::RlMetadataField& field : in.map) {
        ToProto(field.value, &(*fields->mutable_fields())[field.key]);
      }
      return;
    }
  }
}

}  // namespace

RlWildcard::RlWildcard(std::string_view pattern) {
  const size_t first = pattern.find('*');
  const size_t last = pattern.rfind('*');
  head_ = std::string(pattern.substr(0, first));
  tail_ = std::string(pattern.substr(last + 1));
  fixed_ = head_.size() + tail_.size();
  for (size_t at = first + 1; at <= last;) {
    const size_t end = pattern.find('*', at);
    if (end > at) {
      Text& text = middle_.emplace_back();
      text.bytes = std::string(pattern.substr(at, end - at));
      text.border.assign(text.bytes.size(), 0);
      for (size_t i = 1, k = 0; i < text.bytes.size(); ++i) {
        while (k > 0 && text.bytes[i] != text.bytes[k]) k = text.border[k - 1];
        if (text.bytes[i] == text.bytes[k]) ++k;
        text.border[i] = static_cast<uint32_t>(k);
      }
      fixed_ += text.bytes.size();
    }
    at = end + 1;
  }
}

size_t RlWildcard::Find(const Text& text, std::string_view value, size_t from) {
  const std::string& t = text.bytes;
  for (size_t i = from, k = 0; i < value.size(); ++i) {
    while (k > 0 && value[i] != t[k]) k = text.border[k - 1];
    if (value[i] == t[k]) ++k;
    if (k == t.size()) return i + 1 - t.size();
  }
  return std::string_view::npos;
}

bool RlWildcard::Matches(std::string_view value) const {
  if (value.size() < fixed_ || !value.starts_with(head_) || !value.ends_with(tail_)) return false;
  // The middle texts lie between the head and the tail, which may not overlap them.
  const std::string_view between = value.substr(0, value.size() - tail_.size());
  size_t at = head_.size();
  for (const Text& text : middle_) {
    const size_t found = Find(text, between, at);
    if (found == std::string_view::npos) return false;
    at = found + text.bytes.size();
  }
  return true;
}

absl::StatusOr<config::WindowSpec> WindowForUnit(RlUnit unit) {
  switch (unit) {
    case RlUnit::kSecond:
      return config::ParseWindow("1s");
    case RlUnit::kMinute:
      return config::ParseWindow("1m");
    case RlUnit::kHour:
      return config::ParseWindow("1h");
    case RlUnit::kDay:
      return config::ParseWindow("day");
    case RlUnit::kMonth:
      return config::ParseWindow("month");
    case RlUnit::kWeek:
      return config::ParseWindow("week");
    case RlUnit::kYear:
      return config::ParseWindow("year");
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown unit ", static_cast<int>(unit)));
}

std::string RlLimitName(RlUnit unit) {
  return absl::StrCat("per_", ToAbsl(config::RlUnitName(unit)));
}

absl::StatusOr<Plan> OverridePlan(uint32_t requests_per_unit, RlUnit unit) {
  absl::StatusOr<config::WindowSpec> window = WindowForUnit(unit);
  if (!window.ok()) return window.status();
  return OneLimitPlan(RlLimitName(unit), requests_per_unit, unit, *window);
}

absl::StatusOr<RlUnit> UnitFromProto(int value) {
  switch (value) {
    case 1:
      return RlUnit::kSecond;
    case 2:
      return RlUnit::kMinute;
    case 3:
      return RlUnit::kHour;
    case 4:
      return RlUnit::kDay;
    case 5:
      return RlUnit::kMonth;
    case 6:
      return RlUnit::kYear;
    case 7:
      return RlUnit::kWeek;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown rate limit unit ", value));
  }
}

int UnitToProto(RlUnit unit) {
  switch (unit) {
    case RlUnit::kSecond:
      return 1;
    case RlUnit::kMinute:
      return 2;
    case RlUnit::kHour:
      return 3;
    case RlUnit::kDay:
      return 4;
    case RlUnit::kMonth:
      return 5;
    case RlUnit::kYear:
      return 6;
    case RlUnit::kWeek:
      return 7;
  }
  return 0;
}

class RlRuleSet::Builder {
 public:
  Builder(RlRuleSet& set, const config::RateLimitFile& file) : set_(set), file_(file) {}

  // Adds the children `descriptors` under node `parent`, whose stats path is `stat`.
  absl::Status Add(size_t parent, const std::vector<config::RlDescriptor>& descriptors,
                   const std::string& stat, const std::string& path) {
    for (size_t i = 0; i < descriptors.size(); ++i) {
      const config::RlDescriptor& d = descriptors[i];
      const std::string dpath = absl::StrCat(path, "[", i, "]");
      const size_t index = set_.nodes_.size();
      set_.nodes_.emplace_back();
      Node& node = set_.nodes_[parent];
      node.has_children = true;
      if (d.value.empty()) {
        node.any_value.try_emplace(d.key, index);
      } else {
        // A wildcard is also found as written, before any wildcard is tried, as there.
        node.exact[d.key].try_emplace(d.value, index);
        if (absl::StrContains(d.value, '*')) {
          node.wildcard[d.key].emplace_back(RlWildcard(d.value), index);
          if (d.share_threshold) set_.nodes_[index].shared_value = d.value;
        }
      }
      const std::string child_stat =
          absl::StrCat(stat, ".", d.key, d.value.empty() ? "" : "_", d.value);
      if (d.rate_limit.has_value()) {
        auto rule = std::make_unique<RlRule>();
        rule->domain = file_.domain;
        rule->path = child_stat;
        rule->name = d.rate_limit->name;
        rule->unlimited = d.rate_limit->unlimited;
        rule->shadow = d.shadow_mode;
        rule->quota = d.quota_mode && !d.rate_limit->unlimited;
        if (d.metadata.has_value()) {
          google::protobuf::Value metadata;
          ToProto(*d.metadata, &metadata);
          rule->metadata = metadata.struct_value();
        }
        rule->detailed_metric = d.detailed_metric;
        rule->replaces = d.rate_limit->replaces;
        rule->requests_per_unit = d.rate_limit->requests_per_unit;
        if (rule->unlimited) {
          rule->plan.name = rule->path;
          rule->plan.tz = absl::UTCTimeZone();
          rule->plan.tag = StableHash64(rule->plan.name);
          rule->plan.SealAlerts();
        } else {
          rule->unit = d.rate_limit->unit.value_or(RlUnit::kSecond);
          absl::StatusOr<config::WindowSpec> window = WindowForUnit(rule->unit);
          if (!window.ok()) {
            return Refuse(file_.source, absl::StrCat(dpath, ".rate_limit.unit"),
                          ToStd(window.status().message()));
          }
          rule->plan = OneLimitPlan(rule->path, rule->requests_per_unit, rule->unit, *window);
          rule->plan.limits[0].shadow = rule->shadow;  // counted and reported, never denying
          if (rule->quota) {
            rule->spent_plan = rule->plan;
            rule->spent_plan.limits[0].shadow = true;
          }
        }
        set_.nodes_[index].rule = rule.get();
        set_.rules_.push_back(std::move(rule));
      }
      if (absl::Status s = Add(index, d.descriptors, child_stat, dpath + ".descriptors"); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  RlRuleSet& set_;
  const config::RateLimitFile& file_;
};

absl::StatusOr<std::shared_ptr<const RlRuleSet>> RlRuleSet::Build(
    const std::vector<config::RateLimitFile>& files) {
  if (absl::Status s = config::CheckDistinctDomains(files); !s.ok()) return s;
  auto set = std::make_shared<RlRuleSet>();
  for (const config::RateLimitFile& file : files) {
    const size_t root = set->nodes_.size();
    set->nodes_.emplace_back();
    set->roots_.emplace(file.domain, root);
    Builder builder(*set, file);
    if (absl::Status s = builder.Add(root, file.descriptors, file.domain, "descriptors"); !s.ok()) {
      return s;
    }
  }
  return std::shared_ptr<const RlRuleSet>(std::move(set));
}

absl::StatusOr<std::shared_ptr<const RlRuleSet>> RlRuleSet::Load(std::string_view path) {
  if (path.empty()) return Build({});
  absl::StatusOr<std::vector<config::RateLimitFile>> files = config::LoadRateLimitConfig(path);
  if (!files.ok()) return files.status();
  return Build(*files);
}

bool RlRuleSet::HasDomain(std::string_view domain) const { return roots_.contains(ToAbsl(domain)); }

const RlRuleSet::Node* RlRuleSet::Pick(const Node& node, std::string_view key,
                                       std::string_view value) const {
  if (const auto by_key = node.exact.find(ToAbsl(key)); by_key != node.exact.end()) {
    if (const auto it = by_key->second.find(ToAbsl(value)); it != by_key->second.end()) {
      return &nodes_[it->second];
    }
  }
  if (const auto by_key = node.wildcard.find(ToAbsl(key)); by_key != node.wildcard.end()) {
    for (const auto& [wildcard, index] : by_key->second) {
      if (wildcard.Matches(value)) return &nodes_[index];
    }
  }
  if (const auto it = node.any_value.find(ToAbsl(key)); it != node.any_value.end()) {
    return &nodes_[it->second];
  }
  return nullptr;
}

const RlRule* RlRuleSet::Match(std::string_view domain, absl::Span<const RlEntry> entries,
                               std::string* counter_key) const {
  const auto root = roots_.find(ToAbsl(domain));
  if (root == roots_.end()) return nullptr;
  const Node* node = &nodes_[root->second];
  const RlRule* rule = nullptr;
  bool shared = false;  // some level's wildcard shares one counter among its values
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node* next = Pick(*node, entries[i].first, entries[i].second);
    if (next == nullptr) break;
    shared = shared || !next->shared_value.empty();
    if (i + 1 == entries.size()) rule = next->rule;
    if (!next->has_children) break;
    node = next;
  }
  if (rule == nullptr || counter_key == nullptr) return rule;
  if (!shared) {
    *counter_key = RlCounterKey(domain, entries);
    return rule;
  }
  // The walk again, keying each shared wildcard level by its pattern rather than the value.
  std::vector<RlEntry> keyed(entries.begin(), entries.end());
  node = &nodes_[root->second];
  for (RlEntry& entry : keyed) {
    const Node* next = Pick(*node, entry.first, entry.second);
    if (!next->shared_value.empty()) entry.second = next->shared_value;
    node = next;
  }
  *counter_key = RlCounterKey(domain, keyed);
  return rule;
}

void ApplyReplaces(absl::Span<const RlRule*> matched) {
  absl::flat_hash_set<std::string_view> replaced;
  for (const RlRule* rule : matched) {
    if (rule == nullptr) continue;
    for (const std::string& name : rule->replaces) replaced.insert(name);
  }
  if (replaced.empty()) return;
  for (const RlRule*& rule : matched) {
    if (rule != nullptr && !rule->name.empty() && replaced.contains(rule->name)) rule = nullptr;
  }
}

std::string RlCounterKey(std::string_view domain, absl::Span<const RlEntry> entries) {
  std::string out;
  AppendEscaped(out, domain);
  for (const auto& [key, value] : entries) {
    out.push_back('/');
    AppendEscaped(out, key);
    out.push_back('=');
    AppendEscaped(out, value);
  }
  return out;
}

std::string RlSubject(std::string_view counter_key) {
  const bool readable = counter_key.size() + 3 <= kMaxSubjectLength &&
                        counter_key.find('=') != std::string_view::npos &&
                        std::all_of(counter_key.begin(), counter_key.end(), IsSubjectByte);
  if (readable) return absl::StrCat("rl:", ToAbsl(counter_key));
  return Hashed(counter_key);
}

std::string RlGroup(std::string_view domain) {
  const bool readable = !domain.empty() && domain.size() + 3 <= kMaxSubjectLength &&
                        std::all_of(domain.begin(), domain.end(), [](char c) {
                          return IsSubjectByte(c) && c != ':' && c != '=';
                        });
  if (readable) return absl::StrCat("rl:", ToAbsl(domain));
  return Hashed(domain);
}

}  // namespace sluice::rls
