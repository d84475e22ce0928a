// Moved to frontend/resolve.h; this forwarding header keeps the old path and names for code that
// still uses them.
#ifndef SLUICE_HTTP_RESOLVE_H_
#define SLUICE_HTTP_RESOLVE_H_

#include "sluice/frontend/resolve.h"

namespace sluice::http {

using frontend::Refusal;
using frontend::ResolveKey;
using frontend::ResolveSubject;
using frontend::Target;

}  // namespace sluice::http

#endif  // SLUICE_HTTP_RESOLVE_H_
