// Bridges sluice's callback APIs (Limiter, Store) into coroutines.
//
// A callback that runs before the starting call returns (the memory store answers that way) is
// taken as is: the coroutine continues without suspending, which saves a trip through the
// scheduler on every decision. A callback that runs later resumes the coroutine through a
// dispatch to its executor: at once when it runs on the coroutine's thread (the Redis store's
// replies), else posted. Either way a completion never runs inside the code that started the
// operation.
#ifndef SLUICE_HTTP_AWAIT_H_
#define SLUICE_HTTP_AWAIT_H_

#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/functional/any_invocable.h"

namespace sluice::http {

// `start(callback)` begins an operation that calls `callback(T)` exactly once, on any thread.
template <typename T, typename Start>
boost::asio::awaitable<T> AwaitCallback(Start start) {
  struct State {
    std::mutex mu;
    std::optional<T> value;                 // the result, if it came before a waiter
    absl::AnyInvocable<void(T) &&> waiter;  // resumes the coroutine, if it suspended
  };
  auto executor = co_await boost::asio::this_coro::executor;
  auto state = std::make_shared<State>();
  start([state](T result) {
    std::unique_lock lock(state->mu);
    if (state->waiter) {
      auto waiter = std::move(state->waiter);
      lock.unlock();
      std::move(waiter)(std::move(result));
    } else {
      state->value = std::move(result);
    }
  });
  {
    std::lock_guard lock(state->mu);
    if (state->value.has_value()) {
      T ready = std::move(*state->value);
      co_return ready;
    }
  }
  // A named initiation object, not a temporary inside the co_await expression: GCC 12 destroys
  // such temporaries twice when the coroutine suspends.
  auto initiation = [executor, state](auto handler) mutable {
    // Dispatched: on the coroutine's own thread (a Redis reply read there) it resumes at once,
    // from any other thread it is posted. Either way after `start` has returned.
    auto resume = [executor, handler = std::move(handler)](T result) mutable {
      boost::asio::dispatch(executor,
                            [handler = std::move(handler), result = std::move(result)]() mutable {
                              std::move(handler)(std::move(result));
                            });
    };
    std::unique_lock lock(state->mu);
    if (state->value.has_value()) {  // completed between the check and here
      T result = std::move(*state->value);
      lock.unlock();
      resume(std::move(result));
    } else {
      state->waiter = std::move(resume);
    }
  };
  T outcome = co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void(T)>(
      std::move(initiation), boost::asio::use_awaitable);
  co_return outcome;
}

}  // namespace sluice::http

#endif  // SLUICE_HTTP_AWAIT_H_
