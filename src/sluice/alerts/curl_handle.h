// Owning pointers for libcurl handles, shared by the sinks (internal to alerts/).
#ifndef SLUICE_ALERTS_CURL_HANDLE_H_
#define SLUICE_ALERTS_CURL_HANDLE_H_

#include <curl/curl.h>

#include <memory>

namespace sluice::alerts {

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

}  // namespace sluice::alerts

#endif  // SLUICE_ALERTS_CURL_HANDLE_H_
