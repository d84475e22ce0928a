#include "sluice/alerts/sinks.h"

#include <curl/curl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice::alerts {

absl::Status GlobalInit() {
  // A function-local static runs curl_global_init exactly once, even with concurrent callers.
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(code)));
  }
  return absl::OkStatus();
}

}  // namespace sluice::alerts
