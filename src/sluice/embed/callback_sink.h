// The library's in-process alert sink: hands each event to the program's AlertCallback
// (include/sluice/options.h) on the dispatcher's threads.
#ifndef SLUICE_EMBED_CALLBACK_SINK_H_
#define SLUICE_EMBED_CALLBACK_SINK_H_

#include <string>

#include "sluice/alerts/sink.h"
#include "sluice/options.h"

namespace sluice::embed {

class CallbackSink final : public alerts::Sink {
 public:
  // REQUIRES: `callback` is not empty and thread-safe.
  explicit CallbackSink(lib::AlertCallback callback) : callback_(std::move(callback)) {}

  [[nodiscard]] const std::string& name() const override { return name_; }

  // kDelivered once the callback returned. One that throws refused the event for good
  // (kPermanent, to the dead letters): calling it again would most likely throw again.
  alerts::Outcome Deliver(const AlertEvent& event, const alerts::Contact& contact,
                          int attempt) override;

 private:
  const std::string name_ = "callback";
  lib::AlertCallback callback_;
};

}  // namespace sluice::embed

#endif  // SLUICE_EMBED_CALLBACK_SINK_H_
