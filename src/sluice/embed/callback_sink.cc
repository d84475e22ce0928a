#include "sluice/embed/callback_sink.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "sluice/embed/convert.h"

namespace sluice::embed {

alerts::Outcome CallbackSink::Deliver(const AlertEvent& event, const alerts::Contact& contact,
                                      int attempt) {
  (void)contact;
  (void)attempt;
  // The program's exceptions stop here: they must not unwind through the dispatcher's threads.
  try {
    callback_(ToPublic(event));
  } catch (const std::exception& e) {
    return {.kind = alerts::Outcome::Kind::kPermanent,
            .detail = absl::StrCat("callback threw: ", e.what())};
  } catch (...) {
    return {.kind = alerts::Outcome::Kind::kPermanent, .detail = "callback threw"};
  }
  return {.kind = alerts::Outcome::Kind::kDelivered};
}

}  // namespace sluice::embed
