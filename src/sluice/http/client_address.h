// Moved to frontend/client_address.h; this forwarding header keeps the old path and names for
// code that still uses them.
#ifndef SLUICE_HTTP_CLIENT_ADDRESS_H_
#define SLUICE_HTTP_CLIENT_ADDRESS_H_

#include "sluice/frontend/client_address.h"

namespace sluice::http {

using frontend::ClientNetwork;
using frontend::ClientPrefixes;
using frontend::ForwardedForNodes;
using frontend::ProxyTrust;

}  // namespace sluice::http

#endif  // SLUICE_HTTP_CLIENT_ADDRESS_H_
