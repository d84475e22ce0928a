// Bridges sluice's callback APIs (Limiter, Store) into coroutines. The completion is always posted
// to the awaiting coroutine's executor, so it never runs inside the call that started it, even when
// the store answered synchronously (the memory store does).
#ifndef SLUICE_HTTP_AWAIT_H_
#define SLUICE_HTTP_AWAIT_H_

#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::http {

// `start(callback)` begins an operation that calls `callback(T)` exactly once, on any thread.
template <typename T, typename Start>
boost::asio::awaitable<T> AwaitCallback(Start start) {
  auto executor = co_await boost::asio::this_coro::executor;
  T outcome = co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void(T)>(
      [executor, start = std::move(start)](auto handler) mutable {
        start([executor, handler = std::move(handler)](T result) mutable {
          boost::asio::post(executor,
                            [handler = std::move(handler), result = std::move(result)]() mutable {
                              std::move(handler)(std::move(result));
                            });
        });
      },
      boost::asio::use_awaitable);
  co_return outcome;
}

}  // namespace sluice::http

#endif  // SLUICE_HTTP_AWAIT_H_
