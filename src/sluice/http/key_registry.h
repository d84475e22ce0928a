// Moved to frontend/key_registry.h; this forwarding header keeps the old path and names for code
// that still uses them.
#ifndef SLUICE_HTTP_KEY_REGISTRY_H_
#define SLUICE_HTTP_KEY_REGISTRY_H_

#include "sluice/frontend/key_registry.h"

namespace sluice::http {

using frontend::KeyEntry;
using frontend::KeyRegistry;
using frontend::kMaxApiKeyLength;

}  // namespace sluice::http

#endif  // SLUICE_HTTP_KEY_REGISTRY_H_
